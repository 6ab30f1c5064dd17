package status

import (
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/vm"
	"github.com/virtcon/virtcon/webterm"
)

// Options configure the screen.
type Options struct {
	Product, Version string
	// FixedSize keeps the size set with SetSize, ignoring the terminal's.
	FixedSize bool
}

// Model is the status screen.
type Model struct {
	c    common.Common
	src  Sources
	opts Options

	showHelp bool
	ticks    int

	inv     *hostinfo.Inventory
	rep     *hostinfo.Report
	hostErr error
	vms     []vm.Entry
	vmErr   error
	addrs   []Addr
	pending *netcfg.Pending
	// resolved is the last expired change on trial this screen rolled
	// back, shown until another change is on trial.
	resolved *netcfg.ResolvedTry
	web      *webterm.Record // running, from its record; nil: none
	netErr   error
	// the last boot's record (nil: none), whether of this boot
	boot     *host.BootRecord
	bootThis bool
	bootErr  error
	// the node agent's enrolment (nil: none read), read with the network
	director *Director
	dirErr   error

	// The load sparklines: the previous raw sample (CPU use is a
	// difference of two) and the last sparkWidth percentages of each.
	prevUsage        *hostinfo.Usage
	cpuHist, memHist *ring
	usageErr         error

	// loaded: a result (or error) has arrived; busy: a load is in flight.
	hostLoaded, vmsLoaded, netLoaded, usageLoaded bool
	hostBusy, vmsBusy, netBusy, usageBusy         bool
}

var _ common.Component = (*Model)(nil)

// New returns the status screen.
func New(c common.Common, src Sources, opts Options) *Model {
	if c.Now == nil {
		c.Now = time.Now
	}
	w, _ := term.Size(c.Width, c.Height)
	return &Model{c: c, src: src, opts: opts, cpuHist: newRing(sparkWidth(w + 4)), memHist: newRing(sparkWidth(w + 4))}
}

// SetSize lays the screen out for w x h; 0x0 (a serial tty) means 80x24.
func (m *Model) SetSize(w, h int) {
	m.c.Width, m.c.Height = term.Size(w, h)
	// enough samples for the widest sparkline: framed (Render) or in
	// the app's content area (Content), which is a little wider
	m.cpuHist.resize(sparkWidth(m.c.Width + 4))
	m.memHist.resize(sparkWidth(m.c.Width + 4))
}

// Loaded reports whether every source has answered once.
func (m *Model) Loaded() bool {
	return m.hostLoaded && m.vmsLoaded && m.netLoaded && (m.usageLoaded || m.src.Usage == nil)
}

// ShortHelp is the key legend.
func (m *Model) ShortHelp() []key.Binding { return m.c.Keys.ShortHelp() }

// FullHelp is the help screen.
func (m *Model) FullHelp() [][]key.Binding { return m.c.Keys.FullHelp() }

// Init starts every load and the clock.
func (m *Model) Init() tea.Cmd {
	return tea.Batch(m.loadHost(), m.loadVMs(), m.loadNet(), m.sampleUsage(), tickCmd())
}

// Update handles keys and load results. It never waits on I/O.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		if !m.opts.FixedSize {
			m.SetSize(msg.Width, msg.Height)
		}
	case tea.KeyPressMsg:
		k := m.c.Keys
		switch {
		case key.Matches(msg, k.Quit):
			return m, tea.Quit
		case key.Matches(msg, k.Help):
			m.showHelp = !m.showHelp
		case msg.String() == "esc":
			m.showHelp = false
		case key.Matches(msg, k.Refresh):
			return m, tea.Batch(m.loadHost(), m.loadVMs(), m.loadNet())
		case key.Matches(msg, k.Redraw):
			return m, tea.ClearScreen
		}
	case hostMsg:
		m.hostBusy, m.hostLoaded = false, true
		m.hostErr = msg.err
		if msg.err == nil {
			m.inv, m.rep = msg.inv, msg.rep
		} else if m.c.Logger != nil {
			m.c.Logger.Warn("status: host", "err", msg.err)
		}
	case vmsMsg:
		m.vmsBusy, m.vmsLoaded = false, true
		// vm.Manager.List gives the rows with the error of a spec it
		// cannot read (an UNREADABLE row): the counts still hold. The
		// error is logged once while it stays the same (a load every 5 s).
		if msg.err != nil && m.c.Logger != nil && (m.vmErr == nil || m.vmErr.Error() != msg.err.Error()) {
			m.c.Logger.Warn("status: vms", "err", msg.err)
		}
		m.vms, m.vmErr = msg.vms, msg.err
	case netMsg:
		m.netBusy, m.netLoaded = false, true
		m.addrs, m.pending, m.web, m.netErr = msg.addrs, msg.pending, msg.web, msg.err
		m.boot, m.bootThis, m.bootErr = msg.boot, msg.bootThis, msg.bootErr
		if msg.dirErr != nil && m.c.Logger != nil && (m.dirErr == nil || m.dirErr.Error() != msg.dirErr.Error()) {
			m.c.Logger.Warn("status: director", "err", msg.dirErr)
		}
		m.director, m.dirErr = msg.director, msg.dirErr
		if msg.err != nil && m.c.Logger != nil {
			m.c.Logger.Warn("status: network", "err", msg.err)
		}
		switch {
		case msg.resolved != nil:
			m.resolved = msg.resolved
			if m.c.Logger != nil {
				m.c.Logger.Warn("status: rolled back an expired network try", "id", msg.resolved.ID, "why", msg.resolved.Why)
			}
		case m.pending != nil:
			m.resolved = nil
		}
	case usageMsg:
		m.addUsage(msg)
	case tickMsg:
		m.ticks++
		cmds := []tea.Cmd{tickCmd(), m.sampleUsage()}
		if m.ticks%fastEvery == 0 {
			cmds = append(cmds, m.loadVMs(), m.loadNet())
		}
		if m.ticks%hostEvery == 0 {
			cmds = append(cmds, m.loadHost())
		}
		return m, tea.Batch(cmds...)
	}
	return m, nil
}

// FixSize keeps m at its current size whatever the terminal reports (the
// --size override).
func FixSize(m *Model) { m.opts.FixedSize = true }
