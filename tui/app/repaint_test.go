package app

import (
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

// step is one event of a repaint scenario: the clock moves to at (from
// the start), then a tick or a key is delivered; clears is how many
// whole-screen repaints it must ask for.
type step struct {
	at     time.Duration
	key    string // "" delivers the app's second tick
	clears int
}

func runSteps(t *testing.T, repaint time.Duration, steps []step) {
	t.Helper()
	r := newRig(t, term.Plain, Options{Repaint: repaint, Kiosk: true})
	r.m.Init()
	for i, s := range steps {
		r.now = fixedNow.Add(s.at)
		before := r.clears
		if s.key == "" {
			r.run(appTickMsg{})
		} else {
			r.run(tuitest.Key(s.key))
		}
		if got := r.clears - before; got != s.clears {
			what := "tick"
			if s.key != "" {
				what = "key " + s.key
			}
			t.Errorf("step %d (%s at %s): %d repaints; want %d", i, what, s.at, got, s.clears)
		}
	}
}

// TestRepaintTimer: with a repaint period the whole screen is repainted
// once the period has passed since the last whole frame, while no key is
// coming; without one, never.
func TestRepaintTimer(t *testing.T) {
	tests := []struct {
		name    string
		repaint time.Duration
		steps   []step
	}{
		{name: "every period while idle", repaint: 15 * time.Second, steps: []step{
			{at: 1 * time.Second}, {at: 14 * time.Second},
			{at: 15 * time.Second, clears: 1}, {at: 16 * time.Second},
			{at: 29 * time.Second}, {at: 30 * time.Second, clears: 1},
			{at: 45 * time.Second, clears: 1},
		}},
		{name: "not while keys come", repaint: 15 * time.Second, steps: func() []step {
			// a key every second from 1 s to 16 s: the first repaints
			st := []step{{at: time.Second, key: "down", clears: 1}}
			for at := 2 * time.Second; at <= 16*time.Second; at += time.Second {
				st = append(st, step{at: at, key: "down"})
			}
			return append(st,
				step{at: 16500 * time.Millisecond}, // the period is over, but a key came 0.5 s ago
				step{at: 17200 * time.Millisecond, clears: 1})
		}()},
		{name: "ctrl+l restarts the period", repaint: 15 * time.Second, steps: []step{
			{at: 10 * time.Second, key: "ctrl+l", clears: 2}, // after a pause, and the redraw itself
			{at: 20 * time.Second}, {at: 25 * time.Second, clears: 1},
		}},
		{name: "a short period for tests", repaint: 2 * time.Second, steps: []step{
			{at: 1 * time.Second}, {at: 2 * time.Second, clears: 1}, {at: 4 * time.Second, clears: 1},
		}},
		{name: "off", repaint: 0, steps: []step{
			{at: 15 * time.Second}, {at: 60 * time.Second}, {at: 600 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.repaint, tc.steps) })
	}
}

// TestRepaintFirstKeyAfterIdle: the first key after a pause repaints the
// whole screen before its answer is drawn (a console whose screen was torn,
// or a terminal that attached mid-session, is whole at once); keys that
// follow one another do not.
func TestRepaintFirstKeyAfterIdle(t *testing.T) {
	tests := []struct {
		name    string
		repaint time.Duration
		steps   []step
	}{
		{name: "first key of the session", repaint: 15 * time.Second, steps: []step{
			{at: 3 * time.Second, key: "down", clears: 1},
			{at: 4 * time.Second, key: "down"},
			{at: 8 * time.Second, key: "down"},
			{at: 13 * time.Second, key: "down", clears: 1}, // 5 s without a key
			{at: 13100 * time.Millisecond, key: "up"},
		}},
		{name: "the gap is never longer than the period", repaint: 2 * time.Second, steps: []step{
			{at: 500 * time.Millisecond, key: "down", clears: 1},
			{at: 1 * time.Second, key: "down"},
			{at: 3 * time.Second, key: "down", clears: 1},
		}},
		{name: "off", repaint: 0, steps: []step{
			{at: 30 * time.Second, key: "down"}, {at: 90 * time.Second, key: "down"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.repaint, tc.steps) })
	}
}

// TestHeaderLockStateOnceKnown: right after a login the writer lock is
// being taken; the header says [RW] or [RO] only once the answer came.
func TestHeaderLockStateOnceKnown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder string
		want   string
	}{
		{name: "writer", want: "alice@tty1 [RW]"},
		{name: "read-only", holder: "bob on tty2 since 09:12", want: "alice@tty1 [RO]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, term.Plain, Options{})
			r.holder = tc.holder
			r.run(tuitest.Key("l"))
			// the login's answer, with the lock's acquisition still in flight
			_, acquire := r.m.Update(loginResultMsg{seq: r.m.loginSeq, user: "alice"})
			if acquire == nil {
				t.Fatal("a login started no lock acquisition")
			}
			header := strings.Split(r.screen(), "\n")[1]
			if !strings.Contains(header, "alice@tty1") || strings.Contains(header, "[RO]") || strings.Contains(header, "[RW]") {
				t.Errorf("header while the lock is being taken: %q; want alice@tty1 without [RO]/[RW]", header)
			}
			r.drain(acquire, 0)
			if header := strings.Split(r.screen(), "\n")[1]; !strings.Contains(header, tc.want) {
				t.Errorf("header once the lock answered: %q; want %q", header, tc.want)
			}
		})
	}
}

// TestKernelConsoleHint: on a console the kernel prints on, the empty
// message line says that kernel messages may appear, how the screen
// mends and where to read them; elsewhere it stays empty.
func TestKernelConsoleHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{name: "serial console", opts: Options{KernelConsole: true, Repaint: 15 * time.Second},
			want: "Kernel messages may print here; repainted every 15s. Read them: dmesg"},
		{name: "no repaint", opts: Options{KernelConsole: true},
			want: "Kernel messages may print here; ^L repaints. Read them: dmesg"},
		{name: "not a kernel console", opts: Options{Repaint: 15 * time.Second}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, term.Plain, tc.opts)
			lines := strings.Split(r.screen(), "\n")
			msg := strings.TrimSpace(strings.Trim(lines[len(lines)-5], "|"))
			if msg != tc.want {
				t.Errorf("message line %q; want %q", msg, tc.want)
			}
			tuitest.CheckSize(t, r.screen(), 80, 24)
		})
	}
}
