package dcui

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/internal/reexec"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/paths"
)

// TestMain: a session's checks may re-execute this binary as the KVM
// probe (a cold cache), as the DCUI's PAM login would as its helper.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// openPTY opens a pseudo-terminal pair laid out w x h.
func openPTY(t *testing.T, w, h int) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(w), Row: uint16(h)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// ptyOutput collects what the session draws on the master side.
type ptyOutput struct{ testutil.Buffer }

func (o *ptyOutput) copyFrom(r io.Reader) { io.Copy(&o.Buffer, r) }

func (o *ptyOutput) waitFor(t *testing.T, timeout time.Duration, want ...string) {
	t.Helper()
	testutil.WaitForText(t, timeout, 10*time.Millisecond, o.String, want...)
}

// TestRunOnPTYEndsWithItsContext runs a whole DCUI session through Run on
// a pty this test made, over a temp layout and a fixture host (nothing
// reads the live host's state or runs the KVM probe), until the status
// screen is drawn and loaded; then cancels the session's ctx: Run returns
// at once with no error, and the terminal is as it was (modes, alternate
// screen, cursor).
func TestRunOnPTYEndsWithItsContext(t *testing.T) {
	master, slave := openPTY(t, 80, 24)
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	out := &ptyOutput{}
	go out.copyFrom(master)

	layout := paths.New(t.TempDir())
	hostRoot := fakehost.Tree(t, "pvm-build")
	// this boot's verdict, so the checks never start the probe
	fakehost.CacheVerdict(t, layout.AccelCacheFile(), hostRoot, hostinfo.AccelCache{Acceleration: hostinfo.AccelTCG, Reason: "cached by the test",
		Probe: &kvmprobe.Result{Stage: kvmprobe.StageOpen, Error: "cached by the test"}})
	h := host.New(host.Options{Layout: layout, HostRoot: hostRoot, Logger: testutil.Logger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{In: slave, Out: slave, TERM: "xterm-256color", TTYName: "pts/test", Host: h,
			Hostname: "test-host", IdleTimeout: time.Minute})
	}()

	// the frame, the status screen's sections, then the fixture's
	// inventory once the host load is in
	out.waitFor(t, 10*time.Second, "F2/l", "MANAGEMENT", "VMS")
	out.waitFor(t, 10*time.Second, "AMD EPYC", `KVM probe failed in stage "open`)
	raw, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Lflag&(unix.ICANON|unix.ECHO) != 0 {
		t.Errorf("the session's terminal is not in raw mode (lflag %#x)", raw.Lflag)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned before its ctx ended: %v", err)
	default:
	}

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v after its ctx ended; want nil (the session is over, not failed)", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run still running 2 s after its ctx ended")
	}
	t.Logf("Run returned %s after the cancel", time.Since(start).Round(time.Millisecond))

	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("terminal modes not restored:\n got %+v\nwant %+v", *after, *before)
	}
	out.waitFor(t, 2*time.Second, "\x1b[?1049l", "\x1b[?25h") // alternate screen left, cursor shown
}
