package status

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

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
	// Render draws " "+line inside the frame, above the legend
	body := m.bodyLines(sparkWidth(m.c.Width), m.c.Width-3)
	return append(lines, m.squeeze(body, m.c.Width-3, max(m.c.Height-5, 1))...)
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
	if d, ok := m.directorLine(); ok {
		lines = append(lines, s.Section.Render("DIRECTOR ")+" "+d)
	}
	return lines
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// clean makes host text safe to draw (names, errors, check details),
// ASCII only in the plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }
