package network

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

// wordsFake is fakeSources whose keep, roll back and applies fail with
// the errors the network service gives.
type wordsFake struct {
	*fakeSources
	// applyErrs fail the applies in turn; past its end an apply works.
	applyErrs []error
	// unkept: the apply starts the try, then fails with applyErrs[0]
	// and the try (an *netcfg.UnkeepableTryError).
	unkept                  bool
	confirmErr, rollbackErr error
}

// ApplyDesired does what the core does with AtLeast (netcfg's own test
// covers the core): a refusal for a too-short trial is applied again on
// the least the change needs, and the result says why.
func (f *wordsFake) ApplyDesired(ctx context.Context, cfg *netcfg.Config, opts netcfg.DesiredOptions) (*netcfg.Result, *netcfg.Pending, error) {
	res, p, err := f.applyOnce(ctx, cfg, opts)
	var short *netcfg.DeadlineTooShortError
	if opts.AtLeast && errors.As(err, &short) && short.Min > opts.Try {
		opts.Try = short.Min
		res, p, err = f.applyOnce(ctx, cfg, opts)
		if res != nil {
			res.Lengthened = short
		}
	}
	return res, p, err
}

func (f *wordsFake) applyOnce(ctx context.Context, cfg *netcfg.Config, opts netcfg.DesiredOptions) (*netcfg.Result, *netcfg.Pending, error) {
	f.mu.Lock()
	n := len(f.applies)
	f.mu.Unlock()
	if n >= len(f.applyErrs) {
		return f.fakeSources.ApplyDesired(ctx, cfg, opts)
	}
	if f.unkept {
		res, p, _ := f.fakeSources.ApplyDesired(ctx, cfg, opts)
		return res, p, f.applyErrs[n]
	}
	f.sawCtx("ApplyDesired", ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies = append(f.applies, cfg)
	f.applyOpts = append(f.applyOpts, opts)
	return nil, nil, f.applyErrs[n]
}

func (f *wordsFake) ConfirmDesired(ctx context.Context) error {
	if f.confirmErr == nil {
		return f.fakeSources.ConfirmDesired(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirms++
	return f.confirmErr // the try stays
}

func (f *wordsFake) RollbackDesired(ctx context.Context) error {
	if f.rollbackErr == nil {
		return f.fakeSources.RollbackDesired(ctx)
	}
	f.sawCtx("RollbackDesired", ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rollback++
	return f.rollbackErr // the try stays, with the error
}

// flat is text with its runs of blanks and line breaks as one space: a
// wrapped message line reads as one.
func flat(text string) string { return strings.Join(strings.Fields(text), " ") }

// mustSay checks that the message line says each of wants, and that the
// screen shows it whole (wrapped, not cut), at its size.
func mustSay(t *testing.T, m *Model, wants ...string) {
	t.Helper()
	out := screen(m)
	for _, w := range wants {
		if !strings.Contains(m.msg, w) {
			t.Errorf("message %q; want %q", m.msg, w)
		}
		if !strings.Contains(flat(out), flat(w)) {
			t.Errorf("screen lacks %q:\n%s", w, out)
		}
	}
	tuitest.CheckSize(t, m.Render(), 76, 17)
}

// applyEdit makes an edit and applies it on trial from the review.
func applyEdit(t *testing.T, m *Model) {
	t.Helper()
	press(t, m, "e", "tab", "tab", "ctrl+u")
	typeText(t, m, "192.168.10.254")
	press(t, m, "ctrl+s", "y")
}

// A keep the service refuses says why, and what to do in the screen's
// keys: roll back (b) or, for a rollback that failed, run it again here
// or from a shell.
func TestKeepRefusalWorded(t *testing.T) {
	deadline := fixedNow.Add(-2 * time.Second)
	tests := []struct {
		name  string
		err   error
		key   string // k in the dialog, c on the overview
		wants []string
	}{
		{"rollback failed", fmt.Errorf("confirm: %w", &netcfg.NotConfirmableError{ID: "t1", Deadline: deadline, RollbackError: "restore link br0: no such device"}), "k",
			[]string{"not kept: rolling back this change failed, so the network may be half restored",
				"roll back again (b), or run virt net rollback from a shell", "restore link br0: no such device"}},
		{"deadline passed", fmt.Errorf("confirm: %w", &netcfg.NotConfirmableError{ID: "t1", Deadline: deadline}), "k",
			[]string{"not kept: the trial's deadline 09:26:51 has passed and the change is being rolled back",
				"if it stays on trial, roll back (b)"}},
		{"tried file missing", fmt.Errorf("confirm: %w", &netcfg.TriedFileError{ID: "t1", Path: "/var/lib/virtcon/network/network.yaml.try", Desired: "/etc/virtcon/network.yaml", Missing: true}), "k",
			[]string{"not kept: its tried file /var/lib/virtcon/network/network.yaml.try is missing, so /etc/virtcon/network.yaml would not describe the network",
				"roll back (b), then make the change again"}},
		{"tried file not this try's, from the overview", fmt.Errorf("confirm: %w", &netcfg.TriedFileError{ID: "t1", Path: "/var/lib/virtcon/network/network.yaml.try", Desired: "/etc/virtcon/network.yaml"}), "c",
			[]string{"not kept: /var/lib/virtcon/network/network.yaml.try is not the file it applied",
				"roll back (b), then make the change again"}},
	}
	for _, tc := range tests {
		for _, tier := range []term.Tier{term.Plain, term.Rich} {
			t.Run(tc.name+"/"+tier.String(), func(t *testing.T) {
				f := &wordsFake{fakeSources: newFake(), confirmErr: tc.err}
				f.pending = trial(testConfig())
				m := loaded(t, tier, f, true)
				if tc.key == "c" {
					m.toOverview() // the dialog was not up when the try began
				}
				press(t, m, tc.key)
				if f.confirms != 1 {
					t.Fatalf("confirms %d; want 1", f.confirms)
				}
				mustSay(t, m, tc.wants...)
				if strings.Contains(m.msg, "keep failed:") {
					t.Errorf("message %q is the raw error", m.msg)
				}
				// what it says works: b rolls back
				f.rollbackErr = nil
				press(t, m, "b")
				if f.rollback != 1 {
					t.Errorf("b after the refusal: rollbacks %d; want 1", f.rollback)
				}
			})
		}
	}
}

// A roll back that failed leaves the try on trial, with the error; the
// screen says to roll back again (b), or from a shell.
func TestRollbackFailureWorded(t *testing.T) {
	f := &wordsFake{fakeSources: newFake(), rollbackErr: errors.New("rollback: restore link br0: no such device")}
	f.pending = trial(testConfig())
	m := loaded(t, term.Plain, f, true)
	press(t, m, "b")
	if m.mode != modeKeep {
		t.Fatalf("mode %d after a failed rollback; want the keep dialog still", m.mode)
	}
	mustSay(t, m, "roll back failed; roll back again (b), or run virt net rollback from a shell: rollback: restore link br0: no such device")
}

// An apply the service refuses, or a trial that failed, says why and what
// to do in the screen's keys; the trial that needs longer than the
// screen's 60 s is asked for again with the least the change needs.
func TestApplyRefusalWorded(t *testing.T) {
	past := fixedNow.Add(-2 * time.Second)
	overrun := &netcfg.TryOverrunError{Deadline: fixedNow.Add(time.Minute)}
	short := func(got time.Duration) error {
		return &netcfg.DeadlineTooShortError{Got: got, Min: 66 * time.Second, STP: 60 * time.Second, Margin: netcfg.TryMargin}
	}
	tests := []struct {
		name   string
		errs   []error
		unkept bool
		// pending: the try the reload finds (started elsewhere)
		pending *netcfg.Pending
		tries   []time.Duration
		mode    mode
		wants   []string
	}{
		{"try pending, expired", []error{&netcfg.TryPendingError{ID: "t9", Deadline: past, Expired: true}}, false,
			&netcfg.Pending{ID: "t9", Deadline: past}, []time.Duration{TryFor}, modeKeep,
			[]string{"not applied: the change on trial is past its deadline and rolling back; wait for it, or roll back now (b), then make the change again"}},
		{"try pending, its rollback failed", []error{&netcfg.TryPendingError{ID: "t9", Deadline: past, Expired: true, RollbackError: "restore link br0: no such device"}}, false,
			&netcfg.Pending{ID: "t9", Deadline: past, RollbackError: "restore link br0: no such device"}, []time.Duration{TryFor}, modeKeep,
			[]string{"not applied: rolling back the change on trial failed; roll back again (b), or run virt net rollback from a shell, then make the change again: restore link br0: no such device"}},
		{"overrun", []error{fmt.Errorf("try: %w", fmt.Errorf("%w; the previous state is restored", overrun))}, false,
			nil, []time.Duration{TryFor}, modeMain,
			[]string{"not applied: try: applying and checking took the whole 60 s trial, leaving no time to keep it; the previous state is restored",
				"this screen's trial is fixed: for a longer one, from a shell: virt net apply -f /etc/virtcon/network.yaml --try 120s"}},
		{"unkeepable", []error{&netcfg.UnkeepableTryError{Path: "/var/lib/virtcon/network/network.yaml.try", Err: errors.New("no space left on device")}}, true,
			nil, []time.Duration{TryFor}, modeKeep,
			[]string{"on trial, but it cannot be kept: recording /var/lib/virtcon/network/network.yaml.try failed; roll it back now (b), or it rolls back by itself: no space left on device"}},
		{"too short, then still too short", []error{short(TryFor), short(66 * time.Second)}, false,
			nil, []time.Duration{TryFor, 66 * time.Second}, modeMain,
			[]string{"not applied: this change needs a trial of at least 66 s (STP on the bridges involved takes 60 s before ports forward, plus 5 s to apply and verify), longer than the 66 s asked for; nothing changed"}},
		{"too short, then on a longer trial", []error{short(TryFor)}, false,
			nil, []time.Duration{TryFor, 66 * time.Second}, modeKeep,
			[]string{"on trial for 66 s, not 60 s: STP on the bridges involved takes 60 s before ports forward"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &wordsFake{fakeSources: newFake(), applyErrs: tc.errs, unkept: tc.unkept}
			m := loaded(t, term.Plain, f, true)
			f.pending = tc.pending
			applyEdit(t, m)
			var tries []time.Duration
			for _, o := range f.applyOpts {
				tries = append(tries, o.Try)
			}
			if fmt.Sprint(tries) != fmt.Sprint(tc.tries) {
				t.Errorf("applies on trials %v; want %v", tries, tc.tries)
			}
			if m.mode != tc.mode {
				t.Errorf("mode %d after the apply; want %d:\n%s", m.mode, tc.mode, screen(m))
			}
			mustSay(t, m, tc.wants...)
			if m.mode == modeKeep {
				// what it says works: b rolls back
				press(t, m, "b")
				if f.rollback != 1 {
					t.Errorf("b after the apply: rollbacks %d; want 1", f.rollback)
				}
			}
		})
	}
}

// A message too long for the lines left keeps what it can and ends cut,
// with the tier's ellipsis; the screen keeps its size.
func TestMessageWrapsInTheRoomLeft(t *testing.T) {
	m := loaded(t, term.Plain, newFake(), true)
	m.say(0, "%s", strings.Repeat("word ", 80)+"END")
	lines := m.messageLines(40, 2)
	if len(lines) != 2 {
		t.Fatalf("messageLines(40, 2) = %d lines; want 2: %q", len(lines), lines)
	}
	if got := m.messageLines(40, 0); len(got) != 1 {
		t.Errorf("messageLines(40, 0) = %d lines; want 1", len(got))
	}
	out := screen(m)
	tuitest.CheckSize(t, m.Render(), 76, 17)
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "word word") {
			n++
		}
	}
	if n != 4 {
		t.Errorf("the message takes %d lines; want the 4 the overview leaves:\n%s", n, out)
	}
	if strings.Contains(out, "END") || !strings.Contains(out, "wor"+m.c.Styles.Ellipsis) {
		t.Errorf("a message longer than the room: want it cut with %q:\n%s", m.c.Styles.Ellipsis, out)
	}
	m.say(0, "")
	if got := m.messageLines(40, 3); got != nil {
		t.Errorf("messageLines with no message = %q; want none", got)
	}
}
