package vms

import (
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/vm"
)

// View draws the content area.
func (m *Model) View() tea.View { return tea.NewView(m.Render()) }

// Render is the content area: exactly Height lines of Width cells.
func (m *Model) Render() string {
	s := m.c.Styles
	w, h := m.c.Width, m.c.Height
	lines := m.tableLines()
	rows := m.listRows()
	for len(lines) < rows+1 {
		lines = append(lines, "")
	}
	lines = append(lines[:rows+1], m.footLines()...)
	out := strings.Split(common.Fit(lines, w, h, s.Ellipsis), "\n")
	switch {
	case m.confirm != nil:
		out = overlay(out, m.confirmBox(), w)
	case m.form != nil:
		out = overlay(out, m.formBox(), w)
	case m.snaps != nil:
		out = overlay(out, m.snapsBox(), w)
	case m.menu != nil:
		out = overlay(out, m.menuBox(), w)
	}
	return strings.Join(out, "\n")
}

// columns are the widths of `virt vm list`'s columns but UID, which gets
// what is left.
type columns struct{ name, class, phase, cpu, accel, pid, cpus, mem int }

func (m *Model) columns() columns {
	c := columns{name: 4, class: 8, phase: 12, accel: 5, pid: 7, cpus: 4, mem: 9}
	for _, e := range m.entries {
		c.name = max(c.name, ansi.StringWidth(m.clean(e.Name)))
		c.class = max(c.class, len(e.Class)) // UNREADABLE, whole
	}
	c.name = min(c.name, 20)
	if m.stats.src != nil {
		c.cpu = cpuColW // CPU % and its sparkline (stats.go)
	}
	return c
}

// cell pads or truncates s to exactly n cells.
func (m *Model) cell(s string, n int) string {
	if ansi.StringWidth(s) > n {
		s = ansi.Truncate(s, n, m.c.Styles.Ellipsis)
	}
	return s + strings.Repeat(" ", max(n-ansi.StringWidth(s), 0))
}

func (m *Model) tableLines() []string {
	s := m.c.Styles
	cols := m.columns()
	uidW := m.c.Width - 2 - cols.name - cols.class - cols.phase - cols.accel - cols.pid - cols.cpus - cols.mem - 7
	if cols.cpu > 0 {
		uidW -= cols.cpu + 1
	}
	row := func(name, class, phase, cpu, accel, pid, cpus, mem, uid string) string {
		name, accel, uid = m.clean(name), m.clean(accel), m.clean(uid)
		parts := []string{m.cell(name, cols.name), m.cell(class, cols.class), m.cell(phase, cols.phase)}
		if cols.cpu > 0 {
			parts = append(parts, m.cell(cpu, cols.cpu))
		}
		parts = append(parts, m.cell(accel, cols.accel), m.cell(pid, cols.pid), m.cell(cpus, cols.cpus), m.cell(mem, cols.mem))
		if uidW >= 8 {
			parts = append(parts, m.cell(uid, uidW))
		}
		return strings.Join(parts, " ")
	}
	lines := []string{"  " + s.Section.Render(row("NAME", "CLASS", "PHASE", "CPU", "ACCEL", "PID", "CPUS", "MEMORY", "UID"))}
	switch {
	case !m.loaded:
		return append(lines, "  "+s.Muted.Render("loading"+dots(s)))
	case len(m.entries) == 0 && m.loadErr != nil:
		return append(lines, "  "+s.Badgef(styles.Failure)+" "+m.clean(m.loadErr.Error()))
	case len(m.entries) == 0:
		return append(lines, "  No VMs on this host yet. Create one from a shell:",
			"    "+s.Muted.Render("virt vm create NAME --image IMAGE"),
			"    "+s.Muted.Render("virt apply -f vm.yaml"))
	}
	end := min(m.offset+m.listRows(), len(m.entries))
	for i := m.offset; i < end; i++ {
		e := m.entries[i]
		pid, mem, cpus := "-", "-", "-"
		if e.CPUs > 0 {
			cpus = strconv.Itoa(e.CPUs)
		}
		if e.PID > 0 {
			pid = strconv.Itoa(e.PID)
		}
		mem = m.memCell(e)
		cpu := m.cpuCell(e)
		accel := e.Accel
		if accel == "" {
			accel = "-"
		}
		phase := e.Phase
		busy, isBusy := m.busy[entryKey(e)]
		if isBusy {
			phase = busy.progress() + dots(s)
		}
		name := e.Name
		if i == m.cursor {
			lines = append(lines, s.Selected.Render("> "+row(name, e.Class, phase, cpu, accel, pid, cpus, mem, e.UID)))
			continue
		}
		// style the cells after padding so the columns stay aligned
		r := row(name, e.Class, phase, cpu, accel, pid, cpus, mem, e.UID)
		lines = append(lines, "  "+m.styleRow(r, cols, e, isBusy))
	}
	return lines
}

// styleRow colours the class and phase cells of an unselected row. The
// words themselves carry the meaning; colour only repeats it.
func (m *Model) styleRow(r string, cols columns, e vm.Entry, busy bool) string {
	s := m.c.Styles
	classAt := cols.name + 1
	phaseAt := classAt + cols.class + 1
	phaseEnd := phaseAt + cols.phase
	var cls, ph lipgloss.Style
	cls, ph = s.Value, s.Value
	switch e.Class {
	case vm.ClassMissing:
		cls = s.Badge[styles.Warning]
	case vm.ClassExternal, vm.ClassOrphaned:
		cls = s.Muted
	case vm.ClassUnreadable:
		// ours, but nothing can act on it until its spec is repaired
		cls = s.Badge[styles.Failure]
	}
	switch {
	case e.Class == vm.ClassUnreadable:
		ph = s.Badge[styles.Failure]
	case busy:
		ph = s.Hint
	case e.Phase == vm.PhaseRunning:
		ph = s.Badge[styles.OK]
	case e.Phase == vm.PhaseError || e.Phase == vm.PhaseUnresponsive:
		ph = s.Badge[styles.Failure]
	case e.Phase == vm.PhasePaused || e.Phase == vm.PhaseShuttingDown:
		ph = s.Badge[styles.Warning]
	}
	return ansi.Cut(r, 0, classAt) + cls.Render(ansi.Cut(r, classAt, classAt+cols.class)) +
		ansi.Cut(r, classAt+cols.class, phaseAt) + ph.Render(ansi.Cut(r, phaseAt, phaseEnd)) +
		ansi.Cut(r, phaseEnd, ansi.StringWidth(r))
}

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
}
