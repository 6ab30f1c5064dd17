package status

import (
	"context"
	"errors"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/vm"
	"github.com/virtcon/virtcon/webterm"
)

// Refresh periods, in ticks of one second. The host checks are slow (the
// KVM probe, `qemu --version`) and change rarely.
const (
	tick        = time.Second
	fastEvery   = 5
	hostEvery   = 60
	loadTimeout = 30 * time.Second
	// resolveTimeout bounds the wait of a network load for another
	// process at the network try (a `virt net rollback` that hangs): the
	// addresses and the web terminal line of the same load stay current.
	resolveTimeout = 3 * time.Second
	maxAddrs       = 3
)

type (
	hostMsg struct {
		inv *hostinfo.Inventory
		rep *hostinfo.Report
		err error
	}
	vmsMsg struct {
		vms []vm.Entry
		err error
	}
	netMsg struct {
		addrs    []Addr
		pending  *netcfg.Pending
		resolved *netcfg.ResolvedTry // rolled back by this load
		web      *webterm.Record
		err      error
		boot     *host.BootRecord
		bootThis bool
		bootErr  error
		director *Director
		dirErr   error
	}
	usageMsg struct {
		u   hostinfo.Usage
		err error
	}
	tickMsg struct{}
)

func tickCmd() tea.Cmd { return tea.Tick(tick, func(time.Time) tea.Msg { return tickMsg{} }) }

func (m *Model) loadHost() tea.Cmd {
	if m.hostBusy || m.src.Host == nil {
		return nil
	}
	m.hostBusy = true
	f, parent := m.src.Host, m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, loadTimeout)
		defer cancel()
		inv, rep, err := f(ctx)
		return hostMsg{inv, rep, err}
	}
}

func (m *Model) loadVMs() tea.Cmd {
	if m.vmsBusy || m.src.VMs == nil {
		return nil
	}
	m.vmsBusy = true
	f, parent := m.src.VMs, m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, loadTimeout)
		defer cancel()
		vms, err := f(ctx)
		return vmsMsg{vms, err}
	}
}

func (m *Model) loadNet() tea.Cmd {
	if m.netBusy {
		return nil
	}
	m.netBusy = true
	src, parent := m.src, m.c.Ctx
	return func() tea.Msg {
		var msg netMsg
		if src.Addresses != nil {
			msg.addrs, msg.err = src.Addresses()
		}
		if src.ResolveExpiredTry != nil {
			ctx, cancel := context.WithTimeout(parent, resolveTimeout)
			r, err := src.ResolveExpiredTry(ctx)
			cancel()
			switch {
			case errors.Is(err, netcfg.ErrTryBusy):
				// not now: another process is at the try (a rollback,
				// a confirm, an apply); the next load looks again
			case err != nil && msg.err == nil:
				msg.err = err // a failed rollback: PendingTry shows its error
			case err == nil:
				msg.resolved = r
			}
		}
		if src.PendingTry != nil {
			p, err := src.PendingTry()
			if err != nil && msg.err == nil {
				msg.err = err
			}
			msg.pending = p
		}
		if src.Boot != nil {
			msg.boot, msg.bootThis, msg.bootErr = src.Boot()
		}
		if src.Director != nil {
			msg.director, msg.dirErr = src.Director()
		}
		if src.WebTerminal != nil {
			// an unreadable record shows no URL, and is logged
			w, err := src.WebTerminal()
			if err != nil && msg.err == nil {
				msg.err = err
			}
			msg.web = w
		}
		return msg
	}
}

// sampleUsage reads one CPU/memory sample; a read of two small /proc files,
// but still off the Update goroutine.
func (m *Model) sampleUsage() tea.Cmd {
	if m.usageBusy || m.src.Usage == nil {
		return nil
	}
	m.usageBusy = true
	f := m.src.Usage
	return func() tea.Msg {
		u, err := f()
		return usageMsg{u, err}
	}
}

// addUsage records a sample in the sparklines.
func (m *Model) addUsage(msg usageMsg) {
	m.usageBusy, m.usageLoaded = false, true
	if msg.err != nil {
		// once per distinct error: the sampler runs every second
		if m.c.Logger != nil && (m.usageErr == nil || m.usageErr.Error() != msg.err.Error()) {
			m.c.Logger.Warn("status: usage", "err", msg.err)
		}
		m.usageErr = msg.err
		return
	}
	m.usageErr = nil
	if m.prevUsage != nil {
		m.cpuHist.push(msg.u.CPUPercentSince(*m.prevUsage))
	}
	m.memHist.push(msg.u.MemPercent())
	u := msg.u
	m.prevUsage = &u
}
