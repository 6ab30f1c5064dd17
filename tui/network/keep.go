package network

import (
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/virtcon/virtcon/tui/styles"
)

// keepDialog is "keep these network settings?" while a change is on
// trial, with its countdown. A read-only console can only watch it.
type keepDialog struct {
	*shared
	size
	// btn is the focused button: 0, [Roll back], is the safe one.
	btn int
}

var _ part = (*keepDialog)(nil)

// Capturing: the dialog takes every key on the console that may answer
// it; a read-only one keeps its global keys.
func (d *keepDialog) Capturing() bool { return d.c.Session.CanWrite() }

// CLI is how the CLI answers the same question.
func (d *keepDialog) CLI() string { return "virt net confirm   (roll back: virt net rollback)" }

// ShortHelp is the dialog's legend.
func (d *keepDialog) ShortHelp() []key.Binding {
	k := d.keys
	return []key.Binding{k.Keep, k.Back, k.Buttons, k.Activate}
}

// Update answers the dialog: k keeps, b or esc rolls back, the arrows and
// tab move between the buttons, enter presses the focused one.
func (d *keepDialog) Update(msg tea.KeyPressMsg) (intent, tea.Cmd) {
	switch msg.String() {
	case "left", "right", "tab", "shift+tab":
		d.btn = 1 - d.btn
		return nil, nil
	}
	if d.acting {
		return nil, nil
	}
	// button 0 is [Roll back]: enter alone never keeps by accident
	keep := msg.String() == "k" || (msg.String() == "enter" && d.btn == 1)
	back := msg.String() == "b" || msg.String() == "esc" || (msg.String() == "enter" && d.btn == 0)
	if (keep || back) && !d.mayWrite() {
		return nil, nil
	}
	switch {
	case keep:
		return keepTrial{}, nil
	case back:
		return rollBack{}, nil
	}
	return nil, nil
}

// button draws a dialog button, marked when focused: brackets and an
// arrow, so it shows without colour.
func (d *keepDialog) button(label string, idx int) string {
	if d.btn == idx {
		return d.c.Styles.Selected.Render("[>" + label + "<]")
	}
	return "[ " + label + " ]"
}

// Lines draws the dialog in the middle of the area, the message line
// under it (wrapped, in the lines the box leaves).
func (d *keepDialog) Lines() []string {
	s := d.c.Styles
	p := d.pending
	left := p.Remaining(d.c.Now())
	count := "Rolling back in " + clock(left)
	if left == 0 {
		count = "Rolling back now" + d.dots()
	}
	body := []string{
		s.Title.Render("Keep these network settings?"),
		"",
		s.Badgef(styles.Warning) + " " + s.Title.Render(count),
		"",
		"The new settings are on trial. If you do nothing, the",
		"previous settings come back at " + p.Deadline.In(d.c.Now().Location()).Format("15:04:05") + ".",
		"",
	}
	if d.c.Session.CanWrite() {
		body = append(body, d.button("Roll back", 0)+"   "+d.button("Keep", 1), "",
			s.Muted.Render("k keep   b/esc roll back now"))
	} else {
		body = append(body, s.Muted.Render(d.c.Session.ReadOnlyReason()+":"), s.Muted.Render("only the console holding the lock can keep it."))
	}
	if d.acting {
		body = append(body, "", "working"+d.dots())
	}
	box := s.Frame.Padding(0, 2).Render(strings.Join(body, "\n"))
	msg := d.messageLines(d.w, d.h-lipgloss.Height(box))
	out := strings.Split(lipgloss.Place(d.w, d.h-max(len(msg), 1), lipgloss.Center, lipgloss.Center, box), "\n")
	return append(out, msg...)
}

// tryFlag is the --try flag of the CLI lines.
func tryFlag() string { return fmt.Sprintf(" --try %ds", int(TryFor/time.Second)) }

// clock formats a countdown as m:ss.
func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}
