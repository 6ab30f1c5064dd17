package network

import (
	"context"
	"errors"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
)

// Messages of the screen's host calls.
type (
	loadedMsg struct {
		desired, applied *netcfg.Config
		state            *netcfg.State
		pending          *netcfg.Pending
		err              error
		// fallback and why: what the DHCP reset starts from when the
		// desired file did not load (nil when it did).
		fallback    *netcfg.Config
		fallbackWhy string
	}
	// pollMsg is the state of a try while its dialog is up.
	pollMsg struct {
		pending *netcfg.Pending
		applied *netcfg.Config
		err     error
	}
	appliedMsg struct {
		res     *netcfg.Result
		pending *netcfg.Pending
		err     error
		// try is the trial asked for: TryFor, or longer when the change
		// needs more (longer says why); cli is the change's command.
		try    time.Duration
		longer *netcfg.DeadlineTooShortError
		cli    string
	}
	confirmedMsg  struct{ err error }
	rolledBackMsg struct{ err error }
	testedMsg     struct{ results []netcfg.CheckResult }
	nicsMsg       struct {
		nics []string
		err  error
	}
)

// The host calls. Each runs in a tea.Cmd, its I/O under the session's
// context (closing the session cuts short what runs), and copies what it
// needs, so it never reads the model after Update returned.

func (m *Model) load() tea.Cmd {
	if m.loading || m.src == nil {
		return nil
	}
	m.loading = true
	ctx, src := m.c.Ctx, m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, loadTimeout)
		defer cancel()
		var msg loadedMsg
		var errs []error
		var err error
		if msg.desired, err = src.LoadDesired(); err != nil {
			errs = append(errs, err)
			msg.fallback, msg.fallbackWhy = src.LoadDesiredOrFallback()
		}
		if msg.applied, err = src.LoadApplied(); err != nil {
			errs = append(errs, err)
		}
		if msg.state, err = src.ReadState(ctx); err != nil {
			errs = append(errs, err)
		}
		if msg.pending, err = src.PendingTry(); err != nil {
			errs = append(errs, err)
		}
		msg.err = errors.Join(errs...)
		return msg
	}
}

func (m *Model) poll() tea.Cmd {
	if m.polling {
		return nil
	}
	m.polling = true
	src := m.src
	return func() tea.Msg {
		p, err := src.PendingTry()
		if err != nil || p != nil {
			return pollMsg{pending: p, err: err}
		}
		applied, err := src.LoadApplied()
		return pollMsg{applied: applied, err: err}
	}
}

// applyCmd applies e on a trial of TryFor, or of the least the change
// needs when that is longer (STP on a bridge whose forward delay is
// long): the core refuses a trial too short to apply, verify and let
// the bridges forward before anything changes, and says the least.
func (m *Model) applyCmd(e *edit) tea.Cmd {
	ctx, src, cfg, cli := m.c.Ctx, m.src, e.next, e.cli
	return func() tea.Msg {
		// the trial may grow to what the change needs (AtLeast): the
		// timeout leaves room for the longest the core takes
		ctx, cancel := context.WithTimeout(ctx, maxTry+applySlack)
		defer cancel()
		msg := appliedMsg{try: TryFor, cli: cli}
		msg.res, msg.pending, msg.err = src.ApplyDesired(ctx, cfg, netcfg.DesiredOptions{Try: TryFor, AtLeast: true})
		if msg.res != nil && msg.res.Lengthened != nil {
			msg.try, msg.longer = msg.res.Lengthened.Min, msg.res.Lengthened
		}
		return msg
	}
}

func (m *Model) confirmCmd() tea.Cmd {
	m.acting = true
	ctx, src := m.c.Ctx, m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, loadTimeout)
		defer cancel()
		return confirmedMsg{src.ConfirmDesired(ctx)}
	}
}

func (m *Model) rollbackCmd() tea.Cmd {
	m.acting = true
	ctx, src := m.c.Ctx, m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, loadTimeout)
		defer cancel()
		return rolledBackMsg{src.RollbackDesired(ctx)}
	}
}

func (m *Model) testCmd() tea.Cmd {
	if m.results.testing {
		return nil
	}
	m.results.testing = true
	ctx, src := m.c.Ctx, m.src
	return func() tea.Msg {
		// what the host is meant to have now: during a trial, the file
		// on trial, not network.yaml
		cfg, err := src.LoadEffective()
		if err != nil {
			return testedMsg{[]netcfg.CheckResult{{Name: "network configuration", Detail: err.Error()}}}
		}
		ctx, cancel := context.WithTimeout(ctx, testTimeout)
		defer cancel()
		return testedMsg{src.CheckManagement(ctx, cfg, netcfg.CheckOptions{})}
	}
}

func (m *Model) nicsCmd() tea.Cmd {
	ctx, src := m.c.Ctx, m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, loadTimeout)
		defer cancel()
		nics, err := src.NICs(ctx)
		return nicsMsg{nics, err}
	}
}
