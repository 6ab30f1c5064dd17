package hardware

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// Sources is where the screen reads the host. Host is called from a
// tea.Cmd with a timeout, never from Update.
type Sources struct {
	// Host returns the inventory and the health report.
	Host func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error)
}

// LiveSources reads the host through info, with the KVM probe answered
// from this boot's cache (as the status screen does).
func LiveSources(info *hostinfo.Assessor) Sources {
	return Sources{Host: func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		return info.Check(ctx, hostinfo.CheckRequest{})
	}}
}

// loadTimeout bounds one load: the inventory reads sysfs, the checks may
// run `qemu --version` and, on a cold cache, the KVM probe.
const loadTimeout = 30 * time.Second

type hostMsg struct {
	inv *hostinfo.Inventory
	rep *hostinfo.Report
	err error
}

// Section is a part of the page; tab and 1-5 jump between them.
type Section int

// The sections, in page order.
const (
	Summary Section = iota
	Checks
	PCI
	Hugepages
	Network
	numSections
)

var sectionNames = [numSections]string{"Summary", "Checks", "PCI & IOMMU", "Hugepages", "NICs & disks"}

// String is the section's name on the tab line.
func (s Section) String() string { return sectionNames[s] }

// KeyMap is the screen's keys. They avoid the global letters (h l s v r
// n w g d p x q ?): arrows, j/k, pgup/pgdown, home/end, tab and digits
// only.
type KeyMap struct {
	Up, Down, PageUp, PageDown, Top, Bottom, Next, Prev, Jump key.Binding
}

var _ keys.Map = KeyMap{}

// DefaultKeyMap returns the screen's keys.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		Up:       keys.On("up", "k").Help("up/k", "scroll"),
		Down:     keys.On("down", "j").Help("down/j", "scroll"),
		PageUp:   keys.On("pgup").Help("pgup", "page up"),
		PageDown: keys.On("pgdown", "space").Help("pgdn", "page down"),
		Top:      keys.On("home").Help("home", "top"),
		Bottom:   keys.On("end").Help("end", "bottom"),
		Next:     keys.On("tab").Help("tab", "next section"),
		Prev:     keys.On("shift+tab").Help("shift+tab", "previous section"),
		Jump:     keys.On("1", "2", "3", "4", "5").Help("1-5", "section"),
	}
}

// ShortHelp is the screen's legend.
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Down, k.PageDown, k.Next, k.Jump}
}

// FullHelp is the screen's help.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom}, {k.Next, k.Prev, k.Jump}}
}

// Model is the Hardware screen.
type Model struct {
	c    common.Common
	src  Sources
	keys KeyMap
	vp   viewport.Model

	inv    *hostinfo.Inventory
	rep    *hostinfo.Report
	err    error
	loaded bool
	busy   bool

	sec    Section
	starts [numSections]int // first content line of each section
}

var _ common.Screen = (*Model)(nil)

// New returns the Hardware screen. The app sends ActivateMsg to load it.
func New(c common.Common, src Sources) *Model {
	if c.Now == nil {
		c.Now = time.Now
	}
	m := &Model{c: c, src: src, keys: DefaultKeyMap(), vp: viewport.New()}
	m.vp.KeyMap = viewport.KeyMap{
		Up: m.keys.Up, Down: m.keys.Down, PageUp: m.keys.PageUp, PageDown: m.keys.PageDown,
		// no half pages, no horizontal scroll: lines are cut to the width
	}
	m.SetSize(76, 17)
	return m
}

// Title names the screen.
func (m *Model) Title() string { return "Hardware" }

// CLI is the command that prints what the current section shows.
func (m *Model) CLI() string {
	if m.sec == Checks {
		return "virt host check"
	}
	return "virt host info"
}

// Capturing: the screen has no text field or dialog.
func (m *Model) Capturing() bool { return false }

// Section is the section at the top of the view (or last jumped to).
func (m *Model) Section() Section { return m.sec }

// ShortHelp is the screen's part of the legend.
func (m *Model) ShortHelp() []key.Binding { return m.keys.ShortHelp() }

// FullHelp is the screen's help.
func (m *Model) FullHelp() [][]key.Binding { return m.keys.FullHelp() }

// SetSize lays the content area out: the tab line, the viewport, the
// position line.
func (m *Model) SetSize(w, h int) {
	m.c.Width, m.c.Height = max(w, 20), max(h, 4)
	m.vp.SetWidth(m.c.Width)
	m.vp.SetHeight(m.c.Height - 2)
	m.rebuild()
}

// Init loads nothing: the app activates the screen when it is shown.
func (m *Model) Init() tea.Cmd { return nil }

func (m *Model) load() tea.Cmd {
	if m.busy || m.src.Host == nil {
		return nil
	}
	m.busy = true
	f, parent := m.src.Host, m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, loadTimeout)
		defer cancel()
		inv, rep, err := f(ctx)
		return hostMsg{inv, rep, err}
	}
}

// Update handles keys and the load result; it never waits on I/O.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case common.ActivateMsg, common.RefreshMsg:
		return m, m.load()
	case hostMsg:
		m.busy, m.loaded = false, true
		m.err = msg.err
		if msg.err == nil {
			m.inv, m.rep = msg.inv, msg.rep
		} else if m.c.Logger != nil {
			m.c.Logger.Warn("hardware: load", "err", msg.err)
		}
		m.rebuild()
	case tea.KeyPressMsg:
		m.key(msg)
	}
	return m, nil
}

func (m *Model) key(msg tea.KeyPressMsg) {
	k := m.keys
	switch {
	case key.Matches(msg, k.Next):
		m.jump((m.sec + 1) % numSections)
	case key.Matches(msg, k.Prev):
		m.jump((m.sec + numSections - 1) % numSections)
	case key.Matches(msg, k.Jump):
		m.jump(Section(msg.String()[0] - '1'))
	case key.Matches(msg, k.Top):
		m.vp.GotoTop()
		m.sec = m.sectionAt(m.vp.YOffset())
	case key.Matches(msg, k.Bottom):
		m.vp.GotoBottom()
		m.sec = m.sectionAt(m.vp.YOffset())
	default:
		before := m.vp.YOffset()
		m.vp, _ = m.vp.Update(msg)
		if m.vp.YOffset() != before {
			m.sec = m.sectionAt(m.vp.YOffset())
		}
	}
}

// jump scrolls the section's heading to the top (as far as the content
// allows) and makes it current even when the last sections are too short
// to reach the top.
func (m *Model) jump(s Section) {
	if s < 0 || s >= numSections {
		return
	}
	m.sec = s
	m.vp.SetYOffset(m.starts[s])
}

// sectionAt is the section shown at line, the top of the view; at the
// bottom of the page it is the last one, which may be too short to reach
// the top.
func (m *Model) sectionAt(line int) Section {
	if m.vp.AtBottom() && m.vp.TotalLineCount() > m.vp.Height() {
		return numSections - 1
	}
	cur := Summary
	for s := Summary; s < numSections; s++ {
		if m.starts[s] <= line {
			cur = s
		}
	}
	return cur
}

// rebuild lays the content out again for the current size and data.
func (m *Model) rebuild() {
	y := m.vp.YOffset()
	lines := m.content()
	for i, l := range lines {
		if ansi.StringWidth(l) > m.c.Width {
			lines[i] = ansi.Truncate(l, m.c.Width, m.c.Styles.Ellipsis)
		}
	}
	m.vp.SetContentLines(lines)
	m.vp.SetYOffset(y)
}

// View draws the content area: tabs, the page, the position.
func (m *Model) View() tea.View {
	lines := []string{m.tabs()}
	lines = append(lines, strings.Split(m.vp.View(), "\n")...)
	for len(lines) < m.c.Height-1 {
		lines = append(lines, "")
	}
	lines = append(lines[:m.c.Height-1], m.footer())
	return tea.NewView(common.Fit(lines, m.c.Width, m.c.Height, m.c.Styles.Ellipsis))
}

func (m *Model) tabs() string {
	s := m.c.Styles
	parts := make([]string, 0, numSections)
	for i := Summary; i < numSections; i++ {
		label := fmt.Sprintf("%d %s", i+1, i)
		if i == m.sec {
			// brackets mark the current section in every tier, colour only adds
			parts = append(parts, s.Title.Render("["+label+"]"))
		} else {
			parts = append(parts, " "+s.Muted.Render(label)+" ")
		}
	}
	return strings.Join(parts, " ")
}

func (m *Model) footer() string {
	s := m.c.Styles
	left := ""
	switch {
	case m.busy && m.loaded:
		left = "refreshing" + dots(s)
	case m.loaded && m.err != nil && m.inv != nil:
		left = s.Badgef(styles.Unknown) + " refresh failed: " + m.clean(m.err.Error())
	}
	right := ""
	if total := m.vp.TotalLineCount(); total > 0 && m.inv != nil {
		first := m.vp.YOffset() + 1
		last := min(m.vp.YOffset()+m.vp.Height(), total)
		right = fmt.Sprintf("lines %d-%d of %d", first, last, total)
	}
	gap := m.c.Width - ansi.StringWidth(left) - ansi.StringWidth(right)
	if gap < 1 {
		return left
	}
	return left + strings.Repeat(" ", gap) + s.Muted.Render(right)
}

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
}

// content is the whole page; it records where each section starts.
func (m *Model) content() []string {
	s := m.c.Styles
	switch {
	case !m.loaded && m.inv == nil:
		m.starts = [numSections]int{}
		return []string{"", "  " + s.Muted.Render("loading the inventory and checks"+dots(s))}
	case m.inv == nil:
		m.starts = [numSections]int{}
		lines := []string{"", "  " + s.Badgef(styles.Unknown) + " hardware unavailable:"}
		lines = append(lines, m.wrap(m.err.Error(), 4, s.Value)...)
		return append(lines, "", "  "+s.Muted.Render("F5/r tries again"))
	}
	var lines []string
	for sec, f := range [numSections]func() []string{m.summary, m.checks, m.pci, m.hugepages, m.network} {
		if sec > 0 {
			lines = append(lines, "")
		}
		m.starts[sec] = len(lines)
		lines = append(lines, f()...)
	}
	return lines
}

// wrap breaks plain text to the width after indent spaces, then styles it.
func (m *Model) wrap(text string, indent int, st interface{ Render(...string) string }) []string {
	pad := strings.Repeat(" ", indent)
	width := max(m.c.Width-indent, 10)
	var out []string
	for _, l := range strings.Split(ansi.Wrap(m.clean(text), width, "/-"), "\n") {
		out = append(out, pad+st.Render(l))
	}
	return out
}

func (m *Model) head(title, note string) string {
	s := m.c.Styles
	if note == "" {
		return s.Section.Render(strings.ToUpper(title))
	}
	return s.Section.Render(strings.ToUpper(title)) + "  " + s.Muted.Render(note)
}

// kv is a "  Label      value" line (labels as `virt host info` names them).
func (m *Model) kv(label, value string) string {
	return "  " + m.c.Styles.Label.Render(fmt.Sprintf("%-11s", label)) + m.clean(value)
}

// clean makes host text safe to draw: sysfs strings (a USB disk reports
// its own model name) may hold anything. ASCII only in the plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }

func optU(p *uint64, f func(uint64) string) string {
	if p == nil {
		return "unknown"
	}
	return f(*p)
}

// count is "1 socket", "2 sockets" or "? sockets" (unknown).
func count(p *int, unit string) string {
	switch {
	case p == nil:
		return "? " + unit + "s"
	case *p == 1:
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", *p, unit)
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func num(v uint64) string { return fmt.Sprint(v) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (m *Model) summary() []string {
	inv := m.inv
	lines := []string{m.head("Summary", "")}
	lines = append(lines, m.kv("Host", dash(inv.Hostname)))
	osLine := dash(inv.OS.PrettyName)
	if inv.OS.Kernel != "" {
		osLine += ", kernel " + inv.OS.Kernel
	}
	lines = append(lines, m.kv("OS", osLine))
	cpu := dash(inv.CPU.Model)
	if inv.CPU.Vendor != "" {
		cpu += " (" + inv.CPU.Vendor + ")"
	}
	lines = append(lines, m.kv("CPU", cpu),
		m.kv("", strings.Join([]string{count(inv.CPU.Sockets, "socket"), count(inv.CPU.Cores, "core"), count(inv.CPU.Threads, "thread")}, ", ")))
	vf := strings.Join(inv.CPU.VirtFlags, " ")
	if vf == "" {
		vf = "none"
	}
	lines = append(lines, m.kv("Virt flags", vf))
	if inv.CPU.RunsUnderHypervisor {
		name := inv.CPU.Hypervisor
		if name == "" {
			name = "unnamed"
		}
		lines = append(lines, m.kv("Hypervisor", name+" (this host is itself a VM)"))
	}
	lines = append(lines, m.kv("Memory", fmt.Sprintf("%s total, %s available", optU(inv.Memory.TotalBytes, gib), optU(inv.Memory.AvailableBytes, gib))))
	if inv.NUMA.Nodes == nil {
		lines = append(lines, m.kv("NUMA", "unknown"))
	} else {
		lines = append(lines, m.kv("NUMA", count(&[]int{len(inv.NUMA.Nodes)}[0], "node")))
	}
	for _, n := range inv.NUMA.Nodes {
		lines = append(lines, m.kv(fmt.Sprintf("  node %d", n.ID),
			fmt.Sprintf("cpus %s, %s memory, %s free", dash(n.CPUs), optU(n.MemTotalBytes, gib), optU(n.MemFreeBytes, gib))))
	}
	present := "present"
	if !inv.KVM.DevicePresent {
		present = "absent"
	}
	lines = append(lines, m.kv("KVM", fmt.Sprintf("backend %s, /dev/kvm %s", dash(inv.KVM.Backend), present)))
	iommu := inv.IOMMU.FirmwareTable
	if iommu == "" {
		iommu = "no DMAR/IVRS table"
	}
	iommu += fmt.Sprintf(", %d groups", len(inv.IOMMU.Groups))
	if len(inv.IOMMU.Cmdline) > 0 {
		iommu += "; kernel: " + strings.Join(inv.IOMMU.Cmdline, " ")
	}
	lines = append(lines, m.kv("IOMMU", iommu))
	for _, u := range inv.Unknowns {
		lines = append(lines, m.kv("Unknown", u.Field+": "+u.Reason))
	}
	return lines
}

// Level maps a check status to the badge level: UNKNOWN is [????].
func Level(st hostinfo.Status) styles.Level {
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

func (m *Model) checks() []string {
	s := m.c.Styles
	r := m.rep
	if r == nil {
		return []string{m.head("Checks", "virt host check"), "  " + s.Badgef(styles.Unknown) + " checks unavailable"}
	}
	count := map[hostinfo.Status]int{}
	for _, c := range r.Checks {
		count[c.Status]++
	}
	note := fmt.Sprintf("%d pass, %d warn, %d fail, %d unknown", count[hostinfo.Pass], count[hostinfo.Warn], count[hostinfo.Fail], count[hostinfo.Unknown])
	lines := []string{m.head("Checks", note)}
	al := styles.Failure
	switch r.Acceleration {
	case hostinfo.AccelKVM:
		al = styles.OK
	case hostinfo.AccelTCG:
		al = styles.Warning
	}
	accel := "acceleration: " + r.Acceleration
	if r.AccelerationReason != "" {
		accel += " (" + r.AccelerationReason + ")"
	}
	lines = append(lines, m.badged(s.Badgef(al), accel)...)
	for _, c := range r.Checks {
		lines = append(lines, m.badged(s.Badgef(Level(c.Status)), c.ID+": "+c.Detail)...)
		if c.Hint != "" && c.Status != hostinfo.Pass {
			lines = append(lines, m.wrap("hint: "+c.Hint, 9, s.Hint)...)
		}
	}
	return lines
}

// badged is "  [WARN] text", the text wrapped under itself.
func (m *Model) badged(badge, text string) []string {
	w := m.wrap(text, 9, m.c.Styles.Value)
	w[0] = "  " + badge + " " + strings.TrimLeft(w[0], " ")
	return w
}

func (m *Model) pci() []string {
	s := m.c.Styles
	inv := m.inv
	lines := []string{m.head("PCI & IOMMU", fmt.Sprintf("%d devices, %d IOMMU groups", len(inv.PCI), len(inv.IOMMU.Groups)))}
	if len(inv.PCI) == 0 {
		return append(lines, "  no PCI devices found")
	}
	gpus := map[string]hostinfo.GPU{}
	for _, g := range inv.GPUs {
		gpus[g.Address] = g
	}
	byGroup := map[int][]hostinfo.PCIDevice{}
	var ungrouped []hostinfo.PCIDevice
	for _, d := range inv.PCI {
		if d.IOMMUGroup == nil {
			ungrouped = append(ungrouped, d)
			continue
		}
		byGroup[*d.IOMMUGroup] = append(byGroup[*d.IOMMUGroup], d)
	}
	ids := make([]int, 0, len(byGroup))
	for id := range byGroup {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		devs := byGroup[id]
		head := fmt.Sprintf("  IOMMU group %d", id)
		if len(devs) > 1 {
			head += s.Muted.Render(fmt.Sprintf("  %d devices, passed through together", len(devs)))
		}
		lines = append(lines, s.Label.Render(head))
		for _, d := range devs {
			lines = append(lines, m.device(d, gpus)...)
		}
	}
	if len(ungrouped) > 0 {
		lines = append(lines, s.Label.Render("  no IOMMU group")+s.Muted.Render("  the IOMMU is off: these cannot be passed through"))
		for _, d := range ungrouped {
			lines = append(lines, m.device(d, gpus)...)
		}
	}
	return lines
}

// device is two lines: address, name and a GPU mark; then class, driver
// and NUMA node, as `virt host info` names them.
func (m *Model) device(d hostinfo.PCIDevice, gpus map[string]hostinfo.GPU) []string {
	s := m.c.Styles
	name := strings.TrimSpace(d.Vendor + " " + d.Product)
	if name == "" {
		name = d.VendorID + ":" + d.DeviceID
	}
	first := "    " + m.clean(d.Address+"  "+name)
	if g, ok := gpus[d.Address]; ok || strings.HasPrefix(d.Class, "03") {
		mark := "[GPU]"
		if g.BootVGA {
			mark = "[GPU, boot VGA]"
		}
		first += "  " + s.Badge[styles.Info].Render(mark)
	}
	class := d.ClassName
	if class == "" {
		class = "class " + d.Class
	}
	driver := "no driver"
	if d.Driver != "" {
		driver = "driver " + d.Driver
	}
	second := class + ", " + driver
	if d.NUMANode != nil && *d.NUMANode >= 0 {
		second += fmt.Sprintf(", NUMA node %d", *d.NUMANode)
	}
	pad := strings.Repeat(" ", 6+len(d.Address))
	return []string{first, pad + s.Muted.Render(m.clean(second))}
}

func (m *Model) hugepages() []string {
	s := m.c.Styles
	hp := m.inv.Hugepages
	def := "unknown"
	if hp.DefaultSizeKiB != nil {
		def = fmt.Sprintf("%dkB", *hp.DefaultSizeKiB)
	}
	lines := []string{m.head("Hugepages", ""),
		m.kv("Default", def+" pages, transparent hugepages: "+dash(hp.THP))}
	if len(hp.Pools) == 0 {
		lines = append(lines, "  "+s.Muted.Render("no hugepage sizes found"))
	}
	for _, p := range hp.Pools {
		lines = append(lines, m.kv(fmt.Sprintf("%dkB", p.SizeKiB),
			fmt.Sprintf("total %s, free %s, reserved %s, surplus %s", optU(p.Total, num), optU(p.Free, num), optU(p.Reserved, num), optU(p.Surplus, num))))
	}
	for _, n := range m.inv.NUMA.Nodes {
		for _, p := range n.Hugepages {
			lines = append(lines, m.kv(fmt.Sprintf("  node %d", n.ID),
				fmt.Sprintf("%dkB: total %s, free %s, surplus %s", p.SizeKiB, optU(p.Total, num), optU(p.Free, num), optU(p.Surplus, num))))
		}
	}
	if len(hp.Mounts) == 0 {
		lines = append(lines, m.kv("hugetlbfs", "none mounted"))
	}
	for _, mt := range hp.Mounts {
		lines = append(lines, m.kv("hugetlbfs", fmt.Sprintf("%s (%dkB pages)", mt.Path, mt.PageSizeKiB)))
	}
	return lines
}

func (m *Model) network() []string {
	s := m.c.Styles
	inv := m.inv
	lines := []string{m.head("NICs", fmt.Sprintf("%d interfaces", len(inv.NICs))),
		"  " + s.Label.Render(fmt.Sprintf("%-12s %-17s %-7s %-9s %s", "NIC", "MAC", "STATE", "SPEED", "DRIVER"))}
	for _, n := range inv.NICs {
		speed := "?"
		if n.SpeedMbps != nil {
			speed = fmt.Sprintf("%dMb/s", *n.SpeedMbps)
		}
		drv := dash(n.Driver)
		if n.Virtual {
			drv += " (virtual)"
		}
		lines = append(lines, m.clean(fmt.Sprintf("  %-12s %-17s %-7s %-9s %s", n.Name, dash(n.MAC), dash(n.State), speed, drv)))
	}
	lines = append(lines, "", m.head("Disks", fmt.Sprintf("%d disks", len(inv.Block))),
		"  "+s.Label.Render(fmt.Sprintf("%-12s %10s  %-5s %s", "DISK", "SIZE", "TYPE", "MODEL")))
	for _, b := range inv.Block {
		model := dash(strings.TrimSpace(b.Vendor + " " + b.Model))
		if b.Controller != "" {
			model += " (" + b.Controller + ")"
		}
		if b.Removable {
			model += ", removable"
		}
		lines = append(lines, m.clean(fmt.Sprintf("  %-12s %10s  %-5s %s", b.Name, gib(b.SizeBytes), dash(b.Type), model)))
	}
	return lines
}
