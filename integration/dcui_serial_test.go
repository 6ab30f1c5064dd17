//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
)

// serialRepaint is the repaint period these tests give the DCUI (15 s on
// a real serial console): short, so that they take seconds.
const serialRepaint = 2 * time.Second

// wholeFrame says what keeps screen (a tmux capture) from being one
// whole plain-tier 80x24 frame: a +---+ border on the first and last
// line, and 22 lines of exactly 80 columns between | and |. "" when it is.
func wholeFrame(screen string) string {
	lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
	border := "+" + strings.Repeat("-", 78) + "+"
	if len(lines) != 24 {
		return fmt.Sprintf("%d lines, want 24", len(lines))
	}
	for i, l := range lines {
		switch {
		case i == 0 || i == 23:
			if l != border {
				return fmt.Sprintf("line %d is %q, want the border", i+1, l)
			}
		case len(l) != 80 || l[0] != '|' || l[79] != '|':
			return fmt.Sprintf("line %d is %q, want 80 columns between | and |", i+1, l)
		}
	}
	return ""
}

// waitWhole polls tt's screen until it is a whole frame; it fails after
// timeout with what is wrong.
func (tt *tmuxTerm) waitWhole(timeout time.Duration) time.Duration {
	tt.t.Helper()
	start := time.Now()
	for {
		s := tt.capture()
		why := wholeFrame(s)
		if why == "" {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			tt.t.Fatalf("no whole 80x24 frame %s after: %s; screen:\n%s", timeout, why, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// paneTTY is the terminal device the pane's program runs on.
func (tt *tmuxTerm) paneTTY() string {
	tt.t.Helper()
	out, err := exec.Command("tmux", "-L", tt.socket, "display-message", "-p", "-t", tt.name, "#{pane_tty}").Output()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "/dev/") {
		tt.t.Fatalf("tmux pane_tty: %q, %v", out, err)
	}
	return strings.TrimSpace(string(out))
}

// TestIntegrationDCUISerialHealsKernelText: text written straight to the
// DCUI's terminal from outside, as the kernel prints on its console (a
// module's banner, "hrtimer: interrupt took ..."), tears the plain tier's
// frame; it is whole again within the repaint period, with no key.
func TestIntegrationDCUISerialHealsKernelText(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	tt := startTerm(t, "vt220", dcuiBin, "--root", vmRoot(t), "--console", "--repaint", serialRepaint.String())
	tt.waitFor(10*time.Second, "F2/l", "MANAGEMENT")
	tt.waitWhole(5 * time.Second)

	tty, err := os.OpenFile(tt.paneTTY(), os.O_WRONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	// sent a little apart, as the kernel would
	for _, msg := range []string{
		"[   12.345678] tun: Universal TUN/TAP device driver, 1.6\r\n",
		"[   12.456789] NET: Registered PF_VSOCK protocol family\r\n",
		"[   31.000001] hrtimer: interrupt took 1234567 ns\r\n",
	} {
		if _, err := tty.WriteString(msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	torn := tt.capture()
	if wholeFrame(torn) == "" {
		t.Fatalf("the screen is still whole after the kernel's text; the test shows nothing:\n%s", torn)
	}
	took := tt.waitWhole(serialRepaint + 2*time.Second)
	t.Logf("whole again %s after the text (repaint period %s)", took.Round(10*time.Millisecond), serialRepaint)
	if s := tt.capture(); strings.Contains(s, "hrtimer") || strings.Contains(s, "TUN/TAP") {
		t.Errorf("the kernel's text is still on the mended screen:\n%s", s)
	}
}

// TestIntegrationDCUISerialLateAttach: a terminal that attaches to a
// serial line mid-session (a serial concentrator, virt vm console, a
// KVM-over-IP) sees only what the DCUI writes from then on; within the
// repaint period that is a whole frame, with no key. The fresh terminal
// is a new tmux pane fed only the bytes written after the attach point.
func TestIntegrationDCUISerialLateAttach(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	requireTmux(t)
	p := startOnPTY(t, []string{"TERM=vt220", "VIRTCON_DCUI_REPAINT=" + serialRepaint.String()},
		dcuiBin, "--root", vmRoot(t), "--console", "--tier", "plain")
	p.waitOutput(t, "F2/l", 10*time.Second)
	// attach mid-session: after the first frame and its first updates
	time.Sleep(1500 * time.Millisecond)
	attach := len(p.output())
	time.Sleep(serialRepaint + 1500*time.Millisecond)
	late := p.output()[attach:]

	replay := filepath.Join(t.TempDir(), "late.out")
	if err := os.WriteFile(replay, late, 0o644); err != nil {
		t.Fatal(err)
	}
	// raw: the bytes reach the emulator as the DCUI wrote them for its
	// raw terminal
	tt := startTerm(t, "vt220", "sh", "-c", "stty raw -echo; cat "+replay+"; exec sleep 600")
	tt.waitWhole(5 * time.Second)
	t.Logf("%d bytes after the attach point make a whole frame", len(late))
}

// TestIntegrationDCUISerialFirstKeyRepaints: with a repaint period far
// off, the first key after a pause repaints the torn screen whole before
// its answer (the operator who just arrived at the console presses one).
func TestIntegrationDCUISerialFirstKeyRepaints(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	tt := startTerm(t, "vt220", dcuiBin, "--root", vmRoot(t), "--console", "--repaint", "10m")
	tt.waitFor(10*time.Second, "F2/l", "MANAGEMENT")
	tt.waitWhole(5 * time.Second)
	tty, err := os.OpenFile(tt.paneTTY(), os.O_WRONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	if _, err := tty.WriteString("[   42.000000] hrtimer: interrupt took 1234567 ns\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if s := tt.capture(); wholeFrame(s) == "" {
		t.Fatalf("the screen is still whole after the kernel's text; the test shows nothing:\n%s", s)
	}
	tt.keys(true, "r") // refresh: redraws what changed, and (the first key) everything
	took := tt.waitWhole(2 * time.Second)
	t.Logf("whole %s after the first key", took.Round(10*time.Millisecond))
}
