package status

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/vm"
	"github.com/virtcon/virtcon/webterm"
)

// Addr is one management address (hostinfo.Assessor.Addresses).
type Addr = hostinfo.Addr

// Sources are the screen's collectors. Each is called from a tea.Cmd,
// never from Update, so a slow one (a hung QMP socket, a KVM probe) only
// delays its own part of the screen.
type Sources struct {
	// Host returns the inventory and the health report.
	Host func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error)
	// VMs lists the VMs (vm.Manager.List): rows and an error together
	// while a spec cannot be read (an UNREADABLE row).
	VMs func(ctx context.Context) ([]vm.Entry, error)
	// PendingTry returns the network change on trial, nil when none.
	PendingTry func() (*netcfg.Pending, error)
	// ResolveExpiredTry rolls back a change on trial whose deadline
	// passed with its watchdog gone (netcfg.ResolveExpiredTry); called
	// before PendingTry on each network load.
	ResolveExpiredTry func(ctx context.Context) (*netcfg.ResolvedTry, error)
	// Addresses lists the addresses of the up, non-loopback interfaces.
	Addresses func() ([]Addr, error)
	// WebTerminal returns the running web terminal's record (its URLs),
	// nil when none runs: webterm.Read, never a port that listens.
	WebTerminal func() (*webterm.Record, error)
	// Usage samples CPU and memory use (hostinfo.SampleUsage); called
	// every second for the load sparklines.
	Usage func() (hostinfo.Usage, error)
	// Boot returns the last `virt host boot`'s record (nil: it never
	// ran) and whether it ran in the boot the host is in; read with the
	// network.
	Boot func() (rec *host.BootRecord, thisBoot bool, err error)
}

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
	}
	usageMsg struct {
		u   hostinfo.Usage
		err error
	}
	tickMsg struct{}
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

// View renders the screen on the alternate screen.
func (m *Model) View() tea.View {
	v := tea.NewView(m.Render())
	v.AltScreen = true
	return v
}

// Render is the screen as a string of exactly Height lines of Width cells.
func (m *Model) Render() string {
	s := m.c.Styles
	w, h := term.Size(m.c.Width, m.c.Height)
	iw, ih := max(w-2, 1), max(h-2, 1)
	var body []string
	if m.showHelp {
		body = m.helpLines()
	} else {
		body = m.statusLines()
	}
	if len(body) > ih-1 {
		body = body[:ih-1]
	}
	for len(body) < ih-1 {
		body = append(body, "")
	}
	body = append(body, m.legend())
	for i, l := range body {
		l = ansi.Truncate(" "+l, iw, s.Ellipsis)
		if pad := iw - lipgloss.Width(l); pad > 0 {
			l += strings.Repeat(" ", pad)
		}
		body[i] = l
	}
	return s.Frame.Render(strings.Join(body, "\n"))
}

func (m *Model) legend() string {
	s := m.c.Styles
	var parts []string
	for _, b := range m.ShortHelp() {
		parts = append(parts, s.HelpKey.Render(b.Help().Key)+" "+s.HelpDesc.Render(b.Help().Desc))
	}
	return strings.Join(parts, "  ")
}

func (m *Model) helpLines() []string {
	s := m.c.Styles
	lines := []string{s.Title.Render("Help"), ""}
	for _, col := range m.FullHelp() {
		for _, b := range col {
			lines = append(lines, fmt.Sprintf("  %-6s %s", b.Help().Key, b.Help().Desc))
		}
	}
	return append(lines, "",
		"Every function key has a letter: use the letter when F-keys do not",
		"arrive (serial line, IPMI SOL, browser consoles).",
		"",
		s.Muted.Render("esc or F1/h closes this help."))
}

func (m *Model) loading() string { return m.c.Styles.Muted.Render("loading" + dots(m.c.Styles)) }

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
}

func (m *Model) statusLines() []string {
	s := m.c.Styles
	now := m.c.Now()
	product := m.opts.Product
	if product == "" {
		product = "virtcon"
	}
	host := m.Hostname()
	left := s.Title.Render(product + " " + m.opts.Version)
	right := host + "  " + now.Format("2006-01-02 15:04:05")
	gap := max(m.c.Width-4-lipgloss.Width(left)-lipgloss.Width(right), 1)
	lines := []string{left + strings.Repeat(" ", gap) + right, ""}
	// Render draws " "+line inside the frame
	return append(lines, m.bodyLines(sparkWidth(m.c.Width), m.c.Width-3)...)
}

// bodyLines are the sections under the title line, blank lines between
// them; spark is the width of each load sparkline, width the cells a line
// may take (long hints wrap to it).
func (m *Model) bodyLines(spark, width int) []string {
	s := m.c.Styles
	var lines []string
	lines = append(lines, m.managementLines()...)
	lines = append(lines, "")
	lines = append(lines, m.hostLines()...)
	lines = append(lines, m.loadLine(spark))
	lines = append(lines, "")
	lines = append(lines, m.healthLines(width)...)
	lines = append(lines, "")
	lines = append(lines, s.Section.Render("VMS      ")+" "+m.vmLine())
	lines = append(lines, s.Section.Render("NETWORK  ")+" "+m.tryLine(m.c.Now()))
	if m.src.Boot != nil {
		lines = append(lines, s.Section.Render("BOOT     ")+" "+m.bootLine())
	}
	return lines
}

// bootLine is what the last `virt host boot` did, in one line: "09:12:
// network applied (4 steps), 3 of 4 VMs started, 1 failed: db-01: ...".
func (m *Model) bootLine() string {
	s := m.c.Styles
	switch {
	case !m.netLoaded:
		return m.loading()
	case m.bootErr != nil:
		return s.Badgef(styles.Unknown) + " boot record unreadable: " + m.clean(m.bootErr.Error())
	case m.boot == nil:
		return s.Muted.Render("not recorded: virt host boot has not run on this host")
	}
	r := m.boot
	if !m.bootThis {
		return s.Badgef(styles.Warning) + " virt host boot has not run since the host booted (last: " +
			r.Time.In(m.c.Now().Location()).Format("2006-01-02 15:04") + ")"
	}
	t := r.Tally()
	level := styles.OK
	var parts []string
	switch r.Network.Result {
	case host.NetApplied:
		parts = append(parts, fmt.Sprintf("network applied (%s)", plural(len(r.Network.Steps), "step")))
	case host.NetUnchanged:
		parts = append(parts, "network up")
	case host.NetNone:
		parts = append(parts, "no network configured")
	case host.NetOnTrial:
		parts = append(parts, "network left to the change on trial")
	case host.NetFailed:
		level = styles.Failure
		parts = append(parts, "NETWORK FAILED: "+r.Network.Error)
	}
	switch {
	case r.PolicyError != "":
		level = styles.Failure
		parts = append(parts, "no VM started: host.yaml refused: "+r.PolicyError)
	case r.VMsError != "":
		level = styles.Failure
		parts = append(parts, r.VMsError)
	case t.Wanted == 0:
		parts = append(parts, "no autostart VMs")
	default:
		vms := fmt.Sprintf("%d of %d VMs started", t.Started, t.Wanted-t.AlreadyRunning)
		if t.AlreadyRunning > 0 {
			vms += fmt.Sprintf(" (%d running already)", t.AlreadyRunning)
		}
		parts = append(parts, vms)
		if t.NotStarted > 0 {
			if level == styles.OK {
				level = styles.Warning
			}
			parts = append(parts, fmt.Sprintf("%d not started", t.NotStarted))
		}
		if t.Failed > 0 {
			// last: its error is what the width cuts
			level = styles.Failure
			parts = append(parts, fmt.Sprintf("%d failed: %s: %s", t.Failed, t.FirstFailed.Name, t.FirstFailed.Error))
		}
	}
	// in the zone of the screen's clock (the header's)
	line := m.clean(r.Time.In(m.c.Now().Location()).Format("15:04") + ": " + strings.Join(parts, ", "))
	if level != styles.OK {
		line = s.Badgef(level) + " " + line
	}
	return line
}

func (m *Model) managementLines() []string {
	s := m.c.Styles
	head := s.Section.Render("MANAGEMENT")
	switch {
	case !m.netLoaded:
		return []string{head, "  " + m.loading()}
	case m.netErr != nil && len(m.addrs) == 0:
		return []string{head, "  " + s.Badgef(styles.Unknown) + " addresses unavailable: " + m.clean(m.netErr.Error())}
	case len(m.addrs) == 0:
		return []string{head, "  " + s.Badgef(styles.Warning) + " no address: the host cannot be reached over the network"}
	}
	lines := []string{head}
	// link-local addresses reach nobody beyond the link: listed only when
	// there is nothing else
	addrs := make([]Addr, 0, len(m.addrs))
	for _, a := range m.addrs {
		if !a.Prefix.Addr().IsLinkLocalUnicast() {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		addrs = m.addrs
	}
	for i, a := range addrs {
		if i == maxAddrs-1 && len(addrs) > maxAddrs {
			lines = append(lines, fmt.Sprintf("  %s %d more addresses", s.Bullet, len(addrs)-i))
			break
		}
		url := ""
		if m.web != nil && !a.Prefix.Addr().IsLinkLocalUnicast() {
			url = m.clean(webURLFor(m.web, a.Prefix.Addr()))
		}
		lines = append(lines, strings.TrimRight(fmt.Sprintf("  %-8s %-28s %s", m.clean(a.Iface), a.Prefix, url), " "))
	}
	return append(lines, m.webLine(addrs))
}

// webLine says whether the web terminal runs, by its own record (never by
// a port that listens): the URLs the address lines do not show, or where
// it listens, and its certificate's fingerprint to check in the browser.
func (m *Model) webLine(addrs []Addr) string {
	s := m.c.Styles
	if m.web == nil {
		return "  " + s.Muted.Render("web terminal not running: use SSH or this console")
	}
	shown := map[string]bool{}
	for _, a := range addrs {
		shown[webURLFor(m.web, a.Prefix.Addr())] = true
	}
	var where []string
	for _, u := range m.web.URLs {
		if _, ok := httpsHost(u); ok && !shown[u] {
			where = append(where, u)
		}
	}
	if len(where) == 0 && m.web.Listen != "" {
		where = append(where, "on "+m.web.Listen)
	}
	l := "  web terminal " + strings.Join(where, " ")
	if fp := m.web.CertSHA256; fp != "" {
		// the first 8 bytes fit the line: enough to tell a certificate
		// from another one in the browser's view of it
		if len(fp) > 23 {
			fp = fp[:23] + dots(s)
		}
		l += "  cert " + fp
	}
	return m.clean(l)
}

func (m *Model) hostLines() []string {
	s := m.c.Styles
	head := s.Section.Render("HOST")
	if !m.hostLoaded {
		return []string{head, "  " + m.loading()}
	}
	if m.inv == nil {
		msg := "unavailable"
		if m.hostErr != nil {
			msg += ": " + m.clean(m.hostErr.Error())
		}
		return []string{head, "  " + s.Badgef(styles.Unknown) + " " + msg}
	}
	inv := m.inv
	cpu := m.clean(strings.NewReplacer("(R)", "", "(TM)", "", " CPU ", " ").Replace(inv.CPU.Model))
	if cpu == "" {
		cpu = "unknown model"
	}
	var counts []string
	for _, c := range []struct {
		n    *int
		unit string
	}{{inv.CPU.Sockets, "socket"}, {inv.CPU.Cores, "core"}, {inv.CPU.Threads, "thread"}} {
		if c.n != nil {
			counts = append(counts, plural(*c.n, c.unit))
		}
	}
	if len(counts) > 0 {
		cpu += ", " + strings.Join(counts, " ")
	}
	mem := "unknown"
	if t := inv.Memory.TotalBytes; t != nil {
		mem = gib(*t) + " total"
		if a := inv.Memory.AvailableBytes; a != nil {
			mem += ", " + gib(*a) + " available"
		}
	}
	numa := "unknown"
	if n := inv.NUMA.Nodes; n != nil {
		numa = plural(len(n), "node")
		var parts []string
		for _, node := range n {
			if node.MemTotalBytes != nil {
				parts = append(parts, fmt.Sprintf("node%d %s", node.ID, gib(*node.MemTotalBytes)))
			}
		}
		if len(parts) > 0 {
			numa += ": " + strings.Join(parts, ", ")
		}
	}
	return []string{head,
		"  " + s.Label.Render("CPU     ") + " " + cpu,
		"  " + s.Label.Render("Memory  ") + " " + mem,
		"  " + s.Label.Render("NUMA    ") + " " + numa,
	}
}

// loadLine is "  Load     CPU ▁▂▅▇▃  12%   Mem ▅▅▅▅▆  45%": the
// sparklines of the last samples, newest right, and the current value as
// a number, so the level never rests on the glyphs alone.
func (m *Model) loadLine(n int) string {
	s := m.c.Styles
	label := "  " + s.Label.Render("Load    ") + " "
	switch {
	case m.src.Usage == nil:
		return label + s.Muted.Render("not sampled")
	case m.usageErr != nil:
		return label + s.Badgef(styles.Unknown) + " unavailable: " + m.clean(m.usageErr.Error())
	case !m.usageLoaded:
		return label + m.loading()
	}
	cpu, cpuOK := m.cpuHist.last()
	mem, memOK := m.memHist.last()
	return label + "CPU " + s.Title.Render(sparkline(m.cpuHist.values(), n, m.c.Tier)) + percent(cpu, cpuOK) +
		"   Mem " + s.Title.Render(sparkline(m.memHist.values(), n, m.c.Tier)) + percent(mem, memOK)
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func level(st hostinfo.Status) styles.Level {
	switch st {
	case hostinfo.Pass:
		return styles.OK
	case hostinfo.Warn:
		return styles.Warning
	case hostinfo.Fail:
		return styles.Failure
	}
	return styles.Unknown
}

// severity orders statuses for "worst": FAIL, then WARN, then UNKNOWN.
func severity(st hostinfo.Status) int {
	switch st {
	case hostinfo.Fail:
		return 3
	case hostinfo.Warn:
		return 2
	case hostinfo.Unknown:
		return 1
	}
	return 0
}

// Worst returns the most severe check (the first of equals), and false when
// every check passed.
func Worst(r *hostinfo.Report) (hostinfo.Check, bool) {
	var worst hostinfo.Check
	found := false
	for _, c := range r.Checks {
		if severity(c.Status) > 0 && (!found || severity(c.Status) > severity(worst.Status)) {
			worst, found = c, true
		}
	}
	return worst, found
}

// healthLines are the acceleration verdict and the worst check with its
// hint, wrapped to width: the hint is the advice, it must not be cut.
func (m *Model) healthLines(width int) []string {
	s := m.c.Styles
	head := s.Section.Render("HEALTH")
	if !m.hostLoaded {
		return []string{head, "  " + m.loading()}
	}
	if m.rep == nil {
		return []string{head, "  " + s.Badgef(styles.Unknown) + " checks unavailable"}
	}
	r := m.rep
	al := styles.OK
	switch r.Acceleration {
	case hostinfo.AccelTCG:
		al = styles.Warning
	case hostinfo.AccelKVM:
	default:
		al = styles.Failure
	}
	accel := "  " + s.Badgef(al) + " acceleration: " + r.Acceleration
	if r.AccelerationReason != "" {
		accel += " (" + m.clean(r.AccelerationReason) + ")"
	}
	lines := []string{head, accel}
	c, ok := Worst(r)
	if !ok {
		return append(lines, "  "+s.Badgef(styles.OK)+" "+plural(len(r.Checks), "check")+" passed")
	}
	lines = append(lines, "  "+s.Badgef(level(c.Status))+" "+m.clean(c.ID+": "+c.Detail))
	if c.Hint != "" {
		// under the badge's text; continuation lines under the hint's
		const indent = "         "
		wrapped := strings.Split(ansi.Wrap("hint: "+m.clean(c.Hint), max(width-len(indent), 20), "/-"), "\n")
		for i, l := range wrapped {
			pad := indent
			if i > 0 {
				pad, l = hang, strings.TrimLeft(l, " ")
			}
			lines = append(lines, pad+s.Hint.Render(l))
		}
	}
	return lines
}

// phaseOrder puts the phases an operator acts on first.
var phaseOrder = []string{vm.PhaseRunning, vm.PhasePaused, vm.PhaseShuttingDown, vm.PhaseUnresponsive, vm.PhaseError, vm.PhaseStopped}

func (m *Model) vmLine() string {
	s := m.c.Styles
	switch {
	case !m.vmsLoaded:
		return m.loading()
	case m.vmErr != nil && m.vms == nil:
		return s.Badgef(styles.Unknown) + " unavailable: " + m.clean(m.vmErr.Error())
	case len(m.vms) == 0:
		return "none defined"
	}
	byPhase := map[string]int{}
	unreadable := 0
	for _, e := range m.vms {
		if e.Class == vm.ClassUnreadable {
			// its phase is unknown: told apart, first, not counted as one
			unreadable++
			continue
		}
		p := e.Phase
		if p == "" {
			p = strings.ToLower(e.Class)
		}
		byPhase[p]++
	}
	var parts []string
	for _, p := range phaseOrder {
		if n := byPhase[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ToLower(p)))
			delete(byPhase, p)
		}
	}
	rest := make([]string, 0, len(byPhase))
	for p := range byPhase {
		rest = append(rest, p)
	}
	sort.Strings(rest)
	for _, p := range rest {
		parts = append(parts, fmt.Sprintf("%d %s", byPhase[p], strings.ToLower(p)))
	}
	total := fmt.Sprintf("(%d total)", len(m.vms))
	line := total
	if len(parts) > 0 {
		line = strings.Join(parts, ", ") + " " + total
	}
	switch {
	case unreadable > 0:
		// first, so that a narrow screen cuts the counts, not the problem
		sep := "; "
		if len(parts) == 0 {
			sep = " "
		}
		line = plural(unreadable, "VM") + " unreadable (see VMs)" + sep + line
	case m.vmErr != nil:
		line += "; list incomplete: " + m.clean(m.vmErr.Error())
	}
	switch {
	case unreadable > 0:
		line = s.Badgef(styles.Failure) + " " + line
	case m.vmErr != nil || m.countPhases(vm.PhaseError, vm.PhaseUnresponsive) > 0:
		line = s.Badgef(styles.Warning) + " " + line
	}
	return line
}

func (m *Model) countPhases(phases ...string) int {
	n := 0
	for _, e := range m.vms {
		for _, p := range phases {
			if e.Phase == p {
				n++
			}
		}
	}
	return n
}

func (m *Model) tryLine(now time.Time) string {
	s := m.c.Styles
	switch {
	case !m.netLoaded:
		return m.loading()
	case m.pending == nil && m.resolved != nil:
		return s.Badgef(styles.Warning) + " expired change on trial rolled back at " + m.resolved.At.Local().Format(time.TimeOnly) +
			": " + m.clean(m.resolved.Why)
	case m.pending == nil:
		return "no change on trial"
	case m.pending.RollbackError != "":
		// nothing here retries it (each refresh would redo the restore);
		// the advice before the error, which the line's width may cut
		return s.Badgef(styles.Failure) + " rollback failed, retry: virt net rollback: " + m.clean(m.pending.RollbackError)
	}
	left := m.pending.Remaining(now).Round(time.Second)
	if left == 0 {
		return s.Badgef(styles.Warning) + " change on trial: deadline passed, rolling back"
	}
	return s.Badgef(styles.Warning) + fmt.Sprintf(" change on trial: rollback in %d:%02d; keep: virt net confirm",
		int(left.Minutes()), int(left.Seconds())%60)
}

// clean makes host text safe to draw (names, errors, check details),
// ASCII only in the plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }

// FixSize keeps m at its current size whatever the terminal reports (the
// --size override).
func FixSize(m *Model) { m.opts.FixedSize = true }
