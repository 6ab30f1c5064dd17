package vms

import (
	"errors"
	"fmt"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/vm"
)

// detailLine is the position in the list and what the core says about the
// selected entry.
func (m *Model) detailLine() string {
	s := m.c.Styles
	e, ok := m.selected()
	if !ok {
		return ""
	}
	pos := fmt.Sprintf("%d/%d", m.cursor+1, len(m.entries))
	var notes []string
	if e.Message != "" {
		notes = append(notes, e.Message)
	}
	if e.AccelReason != "" {
		notes = append(notes, "accel: "+e.AccelReason)
	}
	if e.Autostart {
		notes = append(notes, autostartNote(e))
	}
	if len(notes) == 0 && actionable(e) {
		notes = append(notes, "enter: actions")
	}
	return s.Muted.Render(pos + "  " + m.clean(e.Name) + ": " + m.clean(strings.Join(notes, "; ")))
}

// footLines are the detail line and the message line under the table.
// For an UNREADABLE row what is wrong with its spec is what the operator
// needs: it is marked as a failure, the spec's error first, and, unless
// the screen has a message of its own, the spec file on the message line
// (where the list's error would say the same at greater length). No
// "enter: actions": nothing acts on it until the spec is repaired.
func (m *Model) footLines() []string {
	e, ok := m.selected()
	if !ok || e.Class != vm.ClassUnreadable {
		return []string{m.detailLine(), m.messageLine()}
	}
	s := m.c.Styles
	badge := s.Badgef(styles.Failure) + " "
	indent := strings.Repeat(" ", lipgloss.Width(badge))
	pos := fmt.Sprintf("%d/%d  ", m.cursor+1, len(m.entries))
	se := specErrorFor(m.loadErr, e.UID)
	if se == nil {
		// the core's message alone: wrapped over both lines
		text := pos + m.clean(label(e)) + ": " + m.clean(e.Message)
		if m.msg != "" {
			return []string{badge + text, m.msg}
		}
		first, _, _ := strings.Cut(ansi.Wrap(text, max(m.c.Width-len(indent), 20), "/"), "\n")
		rest, ok := strings.CutPrefix(text, first)
		if !ok {
			first, rest = text, ""
		}
		if rest = strings.TrimLeft(rest, " "); rest != "" {
			rest = indent + rest // Fit cuts it to the width
		}
		return []string{badge + first, rest}
	}
	name := ""
	if e.Name != "" {
		name = m.clean(e.Name) + ": "
	}
	detail := badge + pos + name + "spec unreadable: " + m.clean(se.Err.Error())
	if m.msg != "" {
		return []string{detail, m.msg}
	}
	return []string{detail, indent + m.clean(se.Path)}
}

// specErrorFor finds the error of uid's spec in the list's error (a
// join of one *vm.SpecError per spec that cannot be read).
func specErrorFor(err error, uid string) *vm.SpecError {
	if err == nil || uid == "" {
		return nil
	}
	var se *vm.SpecError
	if errors.As(err, &se) && se.UID == uid && se.Err != nil {
		return se
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if se := specErrorFor(e, uid); se != nil {
				return se
			}
		}
	}
	return nil
}

func (m *Model) messageLine() string {
	if m.msg != "" {
		return m.msg
	}
	if m.loadErr != nil && len(m.entries) > 0 {
		return m.c.Styles.Badgef(styles.Warning) + " " + m.clean(m.loadErr.Error())
	}
	return ""
}

// autostartNote is the detail line's word on a VM that autostarts.
func autostartNote(e vm.Entry) string {
	n := "autostart"
	if e.StartupOrder != 0 {
		n += fmt.Sprintf(" (order %d", e.StartupOrder)
		if e.StartupDelay != 0 {
			n += ", delay " + e.StartupDelay.String()
		}
		n += ")"
	} else if e.StartupDelay != 0 {
		n += " (delay " + e.StartupDelay.String() + ")"
	}
	return n
}
