package status

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/tui/styles"
)

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
