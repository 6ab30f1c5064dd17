package network

import (
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
)

// edit is a change under review: the new configuration and what it is.
type edit struct {
	next  *netcfg.Config
	what  string // "edit management interface"
	cli   string // the equivalent command
	note  string // a warning shown above the changes
	diff  []string
	steps []string
}

// newEdit is the change from base to next: the file's field diff and the
// plan of steps on the host. Nil when neither has anything.
func newEdit(sh *shared, r toReview) *edit {
	e := &edit{next: r.next, what: r.what, cli: r.cli, note: r.note, diff: netcfg.DiffConfigs(r.base, r.next)}
	for _, st := range netcfg.Plan(r.next, sh.state, sh.applied) {
		e.steps = append(e.steps, st.Desc)
	}
	if len(e.diff) == 0 && len(e.steps) == 0 {
		return nil
	}
	return e
}

// review is the review of a change: the field diff and the plan, asking
// to apply it on trial as every confirmation asks (y applies, any other
// key cancels).
type review struct {
	*shared
	size
	edit *edit
}

var _ part = (*review)(nil)

// Capturing: the question takes every key.
func (r *review) Capturing() bool { return true }

// CLI is the command that makes the same change.
func (r *review) CLI() string { return r.edit.cli }

// ShortHelp is the confirmation's legend.
func (r *review) ShortHelp() []key.Binding { return common.ConfirmHelp("apply on trial") }

// Update answers the question.
func (r *review) Update(msg tea.KeyPressMsg) (intent, tea.Cmd) {
	if !common.Confirmed(msg) {
		r.say(styles.Info, "cancelled: nothing changed")
		return toOverview{}, nil
	}
	if !r.mayWrite() {
		return toOverview{}, nil
	}
	return applyChange{edit: r.edit}, nil
}

// listSection is a heading and at most room lines of items, long items
// wrapped, and "... and N more" when they do not fit.
func (r *review) listSection(title string, items []string, room int) []string {
	lines := []string{r.c.Styles.Section.Render(title)}
	used := 0
	for i, it := range items {
		w := wrap("  "+r.clean(it), r.w, "     ")
		if used+len(w) > room || (used+len(w) == room && i < len(items)-1) {
			lines = append(lines, r.c.Styles.Muted.Render(fmt.Sprintf("  %s and %d more", r.dots(), len(items)-i)))
			break
		}
		lines = append(lines, w...)
		used += len(w)
	}
	return lines
}

// Lines draws the review.
func (r *review) Lines() []string {
	s := r.c.Styles
	e := r.edit
	lines := []string{s.Title.Render("Review: " + e.what)}
	// 17 lines: title, two sections, blank, question, buttons
	room := max(r.h-6, 4)
	if e.note != "" {
		badge := s.Badgef(styles.Warning) + " "
		note := wrap(badge+r.clean(e.note), r.w, strings.Repeat(" ", lipgloss.Width(badge)))
		if len(note) > 3 {
			note = note[:3]
		}
		lines = append(lines, note...)
		room = max(room-len(note), 4)
	}
	diffRoom := min(len(e.diff), max(room/2, room-len(e.steps)))
	diff := e.diff
	if len(diff) == 0 {
		diff = []string{s.Muted.Render("(the file is unchanged; the host differs from it)")}
	}
	lines = append(lines, r.listSection("Changes to "+r.opts.DesiredFile, diff, max(diffRoom, 1))...)
	steps := make([]string, len(e.steps))
	for i, st := range e.steps {
		steps[i] = fmt.Sprintf("%d. %s", i+1, st)
	}
	if len(steps) == 0 {
		steps = []string{s.Muted.Render("(no link changes; DNS, host name or DHCP only)")}
	}
	lines = append(lines, r.listSection("Steps on the host", steps, max(room-diffRoom, 1))...)
	lines = append(lines, "",
		fmt.Sprintf("Apply with a %d s trial? It rolls back by itself unless you keep it.", int(TryFor/time.Second)),
		common.ConfirmPrompt(s, "apply it on trial"))
	return lines
}

// busy is the trial apply under way: no key does anything until it ends.
type busy struct {
	*shared
	size
	edit *edit
}

var _ part = (*busy)(nil)

// Capturing: the global keys stay.
func (b *busy) Capturing() bool { return false }

// CLI is the command that makes the same change.
func (b *busy) CLI() string { return b.edit.cli }

// ShortHelp is the overview's legend, whose keys come back when the
// apply ends.
func (b *busy) ShortHelp() []key.Binding { return b.overviewHelp() }

// Update ignores keys while the apply runs.
func (b *busy) Update(tea.KeyPressMsg) (intent, tea.Cmd) { return nil, nil }

// Lines draws what runs.
func (b *busy) Lines() []string {
	return []string{
		b.c.Styles.Title.Render("Applying on trial: " + b.edit.what),
		"",
		"Applying, then checking the links, addresses and gateway" + b.dots(),
		fmt.Sprintf("This takes up to %d s. If it fails, the previous settings come back at once.", int(TryFor/2/time.Second)),
	}
}
