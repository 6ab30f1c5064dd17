package dcui

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/paths"
)

// xtermSequences are what Bubble Tea writes for xterm-like terminals and
// a VT220 does not know: queries (whose late answers land in the input),
// keyboard protocols, bracketed paste, mouse and focus reporting, titles.
var xtermSequences = []string{
	"\x1b[?2026$p", "\x1b[?2027$p", "$p", "\x1b[>4", "\x1b[>1u", "\x1b[>", "\x1b[<", "\x1b[=", "\x1b[?u",
	"\x1b[?2004", "\x1b[?1000", "\x1b[?1002", "\x1b[?1003", "\x1b[?1006", "\x1b[?1004", "\x1b[?2026", "\x1b[?2027",
	"\x1b]", "\x1bP", "\x1b_", "\x1b^",
}

// runPlain runs a session on the plain tier (TERM=vt220 on a serial
// tty's name) on a pty, with the repaint period given, over a fixture
// host; it returns what the session wrote and a stop function.
func runPlain(t *testing.T, repaint time.Duration) (*ptyOutput, func()) {
	t.Helper()
	master, slave := openPTY(t, 0, 0) // a serial line reports 0x0
	out := &ptyOutput{}
	go out.copyFrom(master)
	layout := paths.New(t.TempDir())
	hostRoot := fakehost.Tree(t, "pvm-build")
	fakehost.CacheVerdict(t, layout.AccelCacheFile(), hostRoot, hostinfo.AccelCache{Acceleration: hostinfo.AccelTCG, Reason: "cached by the test",
		Probe: &kvmprobe.Result{Stage: kvmprobe.StageOpen, Error: "cached by the test"}})
	h := host.New(host.Options{Layout: layout, HostRoot: hostRoot, Logger: testutil.Logger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{In: slave, Out: slave, TERM: "vt220", TTYName: "ttyS0", Host: h,
			Hostname: "test-host", IdleTimeout: time.Minute, Console: true, Repaint: repaint, KernelConsole: true})
	}()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(3 * time.Second):
			t.Error("Run still running 3 s after its ctx ended")
		}
	}
	t.Cleanup(cancel)
	return out, stop
}

// TestPlainTierSendsNoXtermSequences: every byte a plain-tier session
// writes, from its start to its end, is one a VT220 knows; the first
// frame comes after an erase of the whole screen (drawn whole, with no
// query to wait for).
func TestPlainTierSendsNoXtermSequences(t *testing.T) {
	out, stop := runPlain(t, 0)
	out.waitFor(t, 10*time.Second, "F2/l", "MANAGEMENT", "Kernel messages may print here; repainted every 15s")
	stop()
	written := out.String()
	for _, seq := range xtermSequences {
		if i := strings.Index(written, seq); i >= 0 {
			t.Errorf("the plain tier wrote %q at byte %d: %q", seq, i, written[max(i-20, 0):min(i+20, len(written))])
		}
	}
	erase, border := strings.Index(written, "\x1b[2J"), strings.Index(written, "+-----")
	if erase < 0 || border < 0 || erase > border {
		t.Errorf("first frame: erase at %d, border at %d; want the whole screen erased before the frame is drawn; start: %q",
			erase, border, written[:min(len(written), 200)])
	}
	for i := 0; i < len(written); i++ {
		if written[i] > 0x7e {
			t.Fatalf("the plain tier wrote byte %#x at %d: %q", written[i], i, written[max(i-20, 0):min(i+20, len(written))])
		}
	}
}

// TestPlainTierRepaintsWhileIdle: with no key, the session erases and
// redraws the whole screen every repaint period (a differential redraw
// alone would only change the clock).
func TestPlainTierRepaintsWhileIdle(t *testing.T) {
	out, stop := runPlain(t, time.Second)
	defer stop()
	out.waitFor(t, 10*time.Second, "F2/l", "MANAGEMENT")
	start := strings.Count(out.String(), "\x1b[2J")
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), "\x1b[2J") < start+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d whole-screen erases in 5 s with a 1 s repaint period; want at least 2", strings.Count(out.String(), "\x1b[2J")-start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// each repaint is a whole frame: its last erase is followed by both borders
	w := out.String()
	last := strings.LastIndex(w, "\x1b[2J")
	deadline = time.Now().Add(3 * time.Second)
	for bytes.Count([]byte(w[last:]), []byte("+"+strings.Repeat("-", 78)+"+")) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no whole frame after the last repaint: %q", w[last:])
		}
		time.Sleep(50 * time.Millisecond)
		w = out.String()
	}
}
