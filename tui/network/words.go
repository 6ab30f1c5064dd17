package network

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/virtcon/virtcon/netcfg"
)

// The network service's errors carry the facts (netcfg's typed errors:
// the try, its deadline, why it cannot be kept, the least trial a change
// needs); what the operator can do about them is said here, in this
// screen's keys, as the CLI says it in its commands (cli/net.go, wordNet).
// Each worded message says what happened, then what to do, then the
// details, which may be long: the message line wraps, and the log has the
// whole error.

// wordKeep words a keep (ConfirmDesired) that failed.
func (s *shared) wordKeep(err error) string {
	back := s.backKey()
	var (
		ended *netcfg.NotConfirmableError
		tried *netcfg.TriedFileError
	)
	switch {
	case errors.As(err, &ended) && ended.RollbackError != "":
		// the watchdog has given up: only an explicit rollback retries
		return fmt.Sprintf("not kept: rolling back this change failed, so the network may be half restored; roll back again (%s), or run virt net rollback from a shell: %s",
			back, ended.RollbackError)
	case errors.As(err, &ended):
		return fmt.Sprintf("not kept: the trial's deadline %s has passed and the change is being rolled back; if it stays on trial, roll back (%s)",
			s.clock(ended.Deadline), back)
	case errors.As(err, &tried):
		what := "its tried file " + tried.Path + " is missing"
		if !tried.Missing {
			what = tried.Path + " is not the file it applied (changed since, or left by another try)"
		}
		return fmt.Sprintf("not kept: %s, so %s would not describe the network; roll back (%s), then make the change again",
			what, tried.Desired, back)
	}
	return fmt.Sprintf("keep failed: %v", err)
}

// wordRollback words a roll back (RollbackDesired) that failed: the try
// stays on trial with the error, and only another rollback retries it.
func (s *shared) wordRollback(err error) string {
	if errors.Is(err, netcfg.ErrNoPendingTry) {
		return fmt.Sprintf("roll back failed: %v", err)
	}
	return fmt.Sprintf("roll back failed; roll back again (%s), or run virt net rollback from a shell: %v", s.backKey(), err)
}

// wordApply words an apply on trial (ApplyDesired) that failed. try is
// the trial asked for, cli the command of the change (its CLI line).
func (s *shared) wordApply(err error, try time.Duration, cli string) string {
	var (
		pending *netcfg.TryPendingError
		short   *netcfg.DeadlineTooShortError
		overrun *netcfg.TryOverrunError
		unkept  *netcfg.UnkeepableTryError
	)
	back := s.backKey()
	switch {
	case errors.As(err, &pending):
		// one started elsewhere since the last load, which shows it
		// in the keep dialog; the log has the whole error
		switch {
		case pending.Err != nil:
			return fmt.Sprintf("not applied: %v", err) // the record cannot be read, and where
		case pending.RollbackError != "":
			return fmt.Sprintf("not applied: rolling back the change on trial failed; roll back again (%s), or run virt net rollback from a shell, then make the change again: %s",
				back, pending.RollbackError)
		case pending.Expired:
			return fmt.Sprintf("not applied: the change on trial is past its deadline and rolling back; wait for it, or roll back now (%s), then make the change again", back)
		}
		return fmt.Sprintf("not applied: a change is on trial; keep (%s) or roll back (%s) first", s.keys.Keep.Help().Key, back)
	case errors.As(err, &short):
		// the screen asked again for short.Min (applyCmd): the least grew
		// meanwhile; nothing changed, and the next apply asks for it
		why := ""
		if short.STP > 0 {
			why = fmt.Sprintf(" (STP on the bridges involved takes %s before ports forward, plus %s to apply and verify)", secs(short.STP), secs(short.Margin))
		}
		return fmt.Sprintf("not applied: this change needs a trial of at least %s%s, longer than the %s asked for; nothing changed; make the change again",
			secs(short.Min), why, secs(short.Got))
	case errors.As(err, &overrun):
		longer := strings.TrimSuffix(cli, tryFlag()) + fmt.Sprintf(" --try %ds", int(2*try/time.Second))
		msg := reword(err, overrun, fmt.Sprintf("applying and checking took the whole %s trial, leaving no time to keep it", secs(try)))
		return fmt.Sprintf("not applied: %s; this screen's trial is fixed: for a longer one, from a shell: %s", msg, strings.TrimSpace(longer))
	case errors.As(err, &unkept):
		// the try stands, and the keep dialog shows it: a keep would
		// be refused (its file is missing), the deadline rolls it back
		return fmt.Sprintf("on trial, but it cannot be kept: recording %s failed; roll it back now (%s), or it rolls back by itself: %v",
			unkept.Path, back, unkept.Err)
	}
	return fmt.Sprintf("not applied: %v", err)
}

// wordLongerTry says that the change is on trial for try, not TryFor:
// it needs that long (short, the refusal of TryFor, says why).
func wordLongerTry(try time.Duration, short *netcfg.DeadlineTooShortError) string {
	why := "applying and checking it needs that long"
	if short.STP > 0 {
		why = fmt.Sprintf("STP on the bridges involved takes %s before ports forward", secs(short.STP))
	}
	return fmt.Sprintf("on trial for %s, not %s: %s", secs(try), secs(TryFor), why)
}

// backKey is the key that rolls the change on trial back, on the
// overview and in the keep dialog alike.
func (s *shared) backKey() string { return s.keys.Rollback.Help().Key }

// clock is t as the keep dialog shows a deadline.
func (s *shared) clock(t time.Time) string { return t.In(s.c.Now().Location()).Format("15:04:05") }

// secs is d as the screen says a trial: "60 s".
func secs(d time.Duration) string {
	return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
}

// reword is err's text with that of inner, an error in its chain,
// replaced by text: the facts around it (the previous state restored, or
// not) stay.
func reword(err, inner error, text string) string {
	msg, old := err.Error(), inner.Error()
	if !strings.Contains(msg, old) {
		return text + ": " + msg
	}
	return strings.Replace(msg, old, text, 1)
}
