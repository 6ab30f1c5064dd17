package vms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/muesli/cancelreader"
	"golang.org/x/term"

	"github.com/virtcon/virtcon/vm"
)

// errConsoleIdle ends a console nobody typed into for the idle timeout.
var errConsoleIdle = errors.New("no input")

// consoleExec runs a VM's serial console in the DCUI's own process while
// Bubble Tea has released the terminal (tea.Exec): the same core call as
// `virt vm console`, but the DCUI keeps what an external program would
// take from it: the idle lock (no input for the idle timeout detaches and
// locks), and the end of the session (its ctx: a SIGTERM or SIGHUP to the
// DCUI, a closed web terminal), which Bubble Tea does not watch meanwhile.
type consoleExec struct {
	// ctx is the session's: the console ends with it
	ctx       context.Context
	mgr       Manager
	ref, name string
	idle      time.Duration
	// activity is called on input and on a detach by the operator, from
	// this goroutine: the DCUI's idle timer must count console typing
	// before Bubble Tea takes the terminal back (its clock ticks queued
	// while the console ran would otherwise lock an active operator out)
	activity func()

	stdin          io.Reader
	stdout, stderr io.Writer
}

func (c *consoleExec) SetStdin(r io.Reader)  { c.stdin = r }
func (c *consoleExec) SetStdout(w io.Writer) { c.stdout = w }
func (c *consoleExec) SetStderr(w io.Writer) { c.stderr = w }

// Run attaches until Ctrl-], the idle timeout, a signal or the VM's end.
func (c *consoleExec) Run() error {
	if f, ok := c.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return fmt.Errorf("console: raw mode: %w", err)
		}
		defer term.Restore(int(f.Fd()), old)
	}
	// a cancellable reader: the console's input goroutine must not keep
	// reading the terminal (and eat the DCUI's next keys) once it ends
	in, err := cancelreader.NewReader(c.stdin)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	defer in.Close()
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)

	act := &activityReader{r: in, onInput: c.activity}
	act.touch()
	if c.idle > 0 {
		go func() {
			t := time.NewTicker(min(time.Second, c.idle))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if act.idleFor() >= c.idle {
						cancel(errConsoleIdle)
						return
					}
				}
			}
		}()
	}
	connected := false
	err = c.mgr.Console(ctx, c.ref, act, c.stdout, func(*vm.VirtualMachine) {
		connected = true
		fmt.Fprintf(c.stderr, "Connected to %s's serial console. Detach with Ctrl-]\r\n", c.name)
	})
	in.Cancel()
	if !connected {
		return err // not running, busy, ...: nothing was attached to detach from
	}
	if cause := context.Cause(ctx); errors.Is(cause, errConsoleIdle) {
		fmt.Fprintf(c.stderr, "\r\nDetached from %s after %s without input (the VM keeps running).\r\n", c.name, c.idle)
		return errConsoleIdle
	}
	if c.activity != nil {
		c.activity()
	}
	fmt.Fprintf(c.stderr, "\r\nDetached from %s (the VM keeps running).\r\n", c.name)
	return err
}

// activityReader records when input last arrived (monotonic clock).
type activityReader struct {
	r       io.Reader
	onInput func()       // nil: none
	last    atomic.Int64 // nanoseconds since start
}

var start = time.Now()

func (a *activityReader) touch() { a.last.Store(int64(time.Since(start))) }

func (a *activityReader) idleFor() time.Duration {
	return time.Since(start) - time.Duration(a.last.Load())
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.touch()
		if a.onInput != nil {
			a.onInput()
		}
	}
	return n, err
}
