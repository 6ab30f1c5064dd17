package network

import (
	"fmt"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/styles"
)

// results is "test management network": its checks, PASS or FAIL each.
// It lives as long as the screen: a test still running when the results
// close lands when they open again.
type results struct {
	*shared
	size
	// overview answers the keys the results do not: they are shown
	// over it, and its keys work on them.
	overview *overview
	results  []netcfg.CheckResult
	testing  bool
}

var _ part = (*results)(nil)

// Capturing: the global keys stay.
func (r *results) Capturing() bool { return false }

// CLI runs the same test.
func (r *results) CLI() string { return "virt net test" }

// ShortHelp is the results' legend.
func (r *results) ShortHelp() []key.Binding {
	k := r.keys
	return []key.Binding{k.Retest, k.Close}
}

// Update answers the results: t tests again, esc or enter closes.
func (r *results) Update(msg tea.KeyPressMsg) (intent, tea.Cmd) {
	switch msg.String() {
	case "esc", "enter":
		return toOverview{}, nil
	case "t":
		return runTest{}, nil
	}
	return r.overview.Update(msg)
}

// Lines draws the results.
func (r *results) Lines() []string {
	s := r.c.Styles
	lines := []string{s.Title.Render("Test management network"), ""}
	if r.testing && r.results == nil {
		return append(lines, s.Muted.Render("  testing"+r.dots()))
	}
	for _, res := range r.results {
		lvl := styles.OK
		if !res.OK {
			lvl = styles.Failure
		}
		lines = append(lines, s.Badgef(lvl)+" "+r.clean(fmt.Sprintf("%-30s %s", res.Name, res.Detail)))
	}
	lines = append(lines, "")
	if netcfg.AllPassed(r.results) {
		lines = append(lines, s.Badgef(styles.OK)+" the management network works")
	} else {
		lines = append(lines, s.Badgef(styles.Failure)+" the management network has a problem: see FAIL above")
	}
	return append(lines, s.Muted.Render("t tests again; esc or enter closes"))
}
