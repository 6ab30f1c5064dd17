package vms

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
)

// runConsole runs a consoleExec over a pipe as Bubble Tea would.
func runConsole(t *testing.T, ctx context.Context, idle time.Duration) (w *io.PipeWriter, out, errOut *testutil.Buffer, done chan error) {
	t.Helper()
	r, w := io.Pipe()
	out, errOut = &testutil.Buffer{}, &testutil.Buffer{}
	c := &consoleExec{ctx: ctx, mgr: &fakeManager{entries: fakeEntries()}, ref: uid(1), name: "web-01", idle: idle}
	c.SetStdin(r)
	c.SetStdout(out)
	c.SetStderr(errOut)
	done = make(chan error, 1)
	go func() { done <- c.Run() }()
	t.Cleanup(func() { w.Close() })
	return w, out, errOut, done
}

func wait(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("console still attached after 5 s")
		return nil
	}
}

func TestConsoleExecDetach(t *testing.T) {
	w, out, errOut, done := runConsole(t, context.Background(), time.Minute)
	w.Write([]byte("uname\r"))
	w.Write([]byte{0x1d})
	if err := wait(t, done); err != nil {
		t.Fatalf("Run = %v; want nil after Ctrl-]", err)
	}
	if got := out.String(); got != "uname\r" {
		t.Errorf("console got %q; want the typed text", got)
	}
	if e := errOut.String(); !strings.Contains(e, "Detach with Ctrl-]") || !strings.Contains(e, "Detached from web-01 (the VM keeps running)") {
		t.Errorf("messages = %q", e)
	}
}

// TestConsoleExecIdle: nobody types for the idle timeout: the console
// detaches and says why; typing keeps it open.
func TestConsoleExecIdle(t *testing.T) {
	w, _, errOut, done := runConsole(t, context.Background(), 1500*time.Millisecond)
	for range 3 { // input keeps it attached past the timeout
		time.Sleep(700 * time.Millisecond)
		w.Write([]byte("x"))
	}
	select {
	case err := <-done:
		t.Fatalf("console detached while typed into: %v", err)
	default:
	}
	start := time.Now()
	err := wait(t, done)
	if !errors.Is(err, errConsoleIdle) {
		t.Fatalf("Run = %v; want errConsoleIdle", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("idle detach took %s after the last input; want about 1.5 s", took)
	}
	if !strings.Contains(errOut.String(), "without input") {
		t.Errorf("messages = %q", errOut.String())
	}
}

// TestConsoleExecSessionCancel: the end of the session (a signal to the
// DCUI, a closed web terminal: its ctx) ends the console.
func TestConsoleExecSessionCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, _, done := runConsole(t, ctx, time.Minute)
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := wait(t, done); errors.Is(err, errConsoleIdle) {
		t.Fatalf("Run = %v after a cancel; want no idle error", err)
	}
}

// TestConsoleExecActivity: typing in the console and detaching count as
// activity for the DCUI's idle timer; an idle detach does not.
func TestConsoleExecActivity(t *testing.T) {
	var n atomic.Int32
	r, w := io.Pipe()
	c := &consoleExec{ctx: context.Background(), mgr: &fakeManager{entries: fakeEntries()}, ref: uid(1), name: "web-01", idle: time.Minute,
		activity: func() { n.Add(1) }}
	c.SetStdin(r)
	c.SetStdout(io.Discard)
	c.SetStderr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- c.Run() }()
	w.Write([]byte("ls\r"))
	w.Write([]byte{0x1d})
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	if n.Load() < 2 {
		t.Errorf("activity called %d times for input and a detach; want at least 2", n.Load())
	}

	n.Store(0)
	r2, w2 := io.Pipe()
	defer w2.Close()
	c2 := &consoleExec{ctx: context.Background(), mgr: &fakeManager{entries: fakeEntries()}, ref: uid(1), name: "web-01", idle: 500 * time.Millisecond,
		activity: func() { n.Add(1) }}
	c2.SetStdin(r2)
	c2.SetStdout(io.Discard)
	c2.SetStderr(io.Discard)
	go func() { done <- c2.Run() }()
	if err := wait(t, done); !errors.Is(err, errConsoleIdle) {
		t.Fatalf("Run = %v; want errConsoleIdle", err)
	}
	if n.Load() != 0 {
		t.Errorf("an idle detach counted as activity (%d calls)", n.Load())
	}
}
