package status

import (
	"slices"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
)

// Content is the status screen's body for w x h cells, without the frame,
// the title line and the key legend: the app draws those around it (its
// header shows product, host name and time). When h is short the blank
// lines between sections go first, then a hint's continuation lines, then
// the NUMA line, so every section stays on screen.
func (m *Model) Content(w, h int) string {
	lines := m.squeeze(m.bodyLines(max((w-loadFixed+1)/2, 4), w), w, h)
	return common.Fit(lines, w, h, m.c.Styles.Ellipsis)
}

// squeeze shortens the body's lines to h, as Content says, for lines of
// w cells.
func (m *Model) squeeze(lines []string, w, h int) []string {
	for len(lines) > h {
		i := slices.Index(lines, "")
		if i < 0 {
			break
		}
		lines = slices.Delete(lines, i, i+1)
	}
	// then the hint's continuation lines, from the last, so VMS and
	// NETWORK stay on screen; the cut is marked
	for len(lines) > h {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, hang) })
		j := i
		for j >= 0 && j+1 < len(lines) && strings.HasPrefix(lines[j+1], hang) {
			j++
		}
		if j <= 0 {
			break
		}
		lines = slices.Delete(lines, j, j+1)
		// the mark must survive the width's cut of a line that fills it
		mark := m.c.Styles.Hint.Render(" " + m.c.Styles.Ellipsis)
		lines[j-1] = ansi.Truncate(lines[j-1], w-lipgloss.Width(mark), "") + mark
	}
	// then the NUMA line (the Hardware screen has it), so the lines at
	// the bottom (BOOT, DIRECTOR) stay
	if len(lines) > h {
		if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(ansi.Strip(l), "  NUMA ") }); i >= 0 {
			lines = slices.Delete(lines, i, i+1)
		}
	}
	return lines
}

// hang indents a wrapped hint's continuation lines.
const hang = "               "

// Hostname is the host's name once the inventory has loaded, else "".
func (m *Model) Hostname() string {
	if m.inv == nil {
		return ""
	}
	return m.clean(m.inv.Hostname)
}

// PendingTry is the network change on trial as last read, nil when none
// (or before the first read): the app asks before quitting while one is.
func (m *Model) PendingTry() *netcfg.Pending { return m.pending }
