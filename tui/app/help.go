package app

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/lipgloss/v2"
)

func (m *Model) helpLines() []string {
	s := m.c.Styles
	k := m.c.Keys
	global := []key.Binding{k.Help, k.Login, k.Status}
	for _, p := range m.pages {
		global = append(global, p.Key)
	}
	global = append(global, k.Refresh, k.Logout)
	if !m.opts.Kiosk {
		global = append(global, k.Quit)
	}
	global = append(global, k.Redraw)
	cur := m.current()
	if cur == nil {
		lines := append([]string{s.Title.Render("Keys")}, twoColumns(global)...)
		return append(lines, "",
			"Every function key has a letter: use the letter when F-keys do not",
			"arrive (serial line, IPMI SOL, browser consoles). Letters act as keys",
			"only while no text field is focused; F-keys always do.")
	}
	// on a page its own keys come first; the global ones follow as far
	// as they fit (the tab line and the legend show them anyway)
	var own []key.Binding
	for _, col := range cur.FullHelp() {
		own = append(own, col...)
	}
	lines := append([]string{s.Title.Render(cur.Title() + " keys")}, twoColumns(own)...)
	lines = append(lines, "", s.Section.Render("Global keys")+" "+s.Muted.Render("(letters work when F-keys do not arrive)"))
	return append(lines, twoColumns(global)...)
}

// twoColumns lays bindings out in two columns, the key column as wide as
// the widest key.
func twoColumns(bs []key.Binding) []string {
	kw := 0
	for _, b := range bs {
		kw = max(kw, lipgloss.Width(b.Help().Key))
	}
	half := (len(bs) + 1) / 2
	var lines []string
	for i := 0; i < half; i++ {
		l := fmt.Sprintf("  %-*s %-24s", kw, bs[i].Help().Key, helpDesc(bs[i]))
		if j := i + half; j < len(bs) {
			l += fmt.Sprintf(" %-*s %s", kw, bs[j].Help().Key, helpDesc(bs[j]))
		}
		lines = append(lines, strings.TrimRight(l, " "))
	}
	return lines
}

func helpDesc(b key.Binding) string {
	d := b.Help().Desc
	if d == "log in" {
		return "log in; lock"
	}
	return d
}
