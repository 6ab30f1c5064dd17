package network

import (
	"strings"

	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/styles"
)

// field is one line of a form: a text input, or a choice between a few
// words (choices set) that space and the arrows toggle.
type field struct {
	label string
	// path is the configuration field it edits (management.addresses):
	// errors whose field starts with it mark this line.
	path    string
	input   textinput.Model
	choices []string
	choice  int
	// hidden fields are skipped (addresses and gateway with DHCP).
	hidden func(f *form) bool
}

func (f *field) value() string {
	if f.choices != nil {
		return f.choices[f.choice]
	}
	return strings.TrimSpace(f.input.Value())
}

// form is a list of fields with one focused; tab/shift+tab and the arrows
// move, enter or ctrl+s submits (to the review, which asks before anything
// is applied: the legend says "^S/enter review"), esc cancels.
type form struct {
	title  string
	fields []*field
	focus  int
	// errs are the admission errors of the last submit, one per line.
	errs []string
}

type formResult int

const (
	formEditing formResult = iota
	formSubmit
	formCancel
)

func newInput(s *styles.Styles, value, placeholder string) textinput.Model {
	in := textinput.New()
	in.Prompt = ""
	in.Placeholder = placeholder
	in.SetValue(value)
	st := textinput.DefaultDarkStyles()
	st.Focused.Prompt, st.Blurred.Prompt = lipgloss.NewStyle(), lipgloss.NewStyle()
	st.Focused.Text, st.Blurred.Text = s.Value, s.Value
	st.Focused.Placeholder, st.Blurred.Placeholder = s.Muted, s.Muted
	// a blinking cursor redraws twice a second: too much for a serial line
	st.Cursor.Blink = false
	in.SetStyles(st)
	in.CharLimit = 256
	return in
}

func (f *form) textField(s *styles.Styles, label, path, value, placeholder string) *field {
	fl := &field{label: label, path: path, input: newInput(s, value, placeholder)}
	f.fields = append(f.fields, fl)
	return fl
}

func (f *form) choiceField(label, path string, choices []string, choice int) *field {
	fl := &field{label: label, path: path, choices: choices, choice: choice}
	f.fields = append(f.fields, fl)
	return fl
}

func (f *form) visible(i int) bool {
	return f.fields[i].hidden == nil || !f.fields[i].hidden(f)
}

// move focuses the next (d=1) or previous (d=-1) visible field, wrapping.
func (f *form) move(d int) {
	for range f.fields {
		f.focus = (f.focus + d + len(f.fields)) % len(f.fields)
		if f.visible(f.focus) {
			break
		}
	}
	f.refocus()
}

func (f *form) refocus() {
	for i, fl := range f.fields {
		if fl.choices != nil {
			continue
		}
		if i == f.focus {
			fl.input.Focus()
			fl.input.CursorEnd()
		} else {
			fl.input.Blur()
		}
	}
}

func (f *form) get(path string) *field {
	for _, fl := range f.fields {
		if fl.path == path {
			return fl
		}
	}
	return nil
}

func (f *form) update(msg tea.KeyPressMsg) (formResult, tea.Cmd) {
	fl := f.fields[f.focus]
	switch msg.String() {
	case "esc":
		return formCancel, nil
	case "ctrl+s", "enter":
		return formSubmit, nil
	case "tab", "down":
		f.move(1)
		return formEditing, nil
	case "shift+tab", "up":
		f.move(-1)
		return formEditing, nil
	}
	if fl.choices != nil {
		switch msg.String() {
		case "space", " ", "right", "l":
			fl.choice = (fl.choice + 1) % len(fl.choices)
		case "left", "h":
			fl.choice = (fl.choice + len(fl.choices) - 1) % len(fl.choices)
		}
		return formEditing, nil
	}
	var cmd tea.Cmd
	fl.input, cmd = fl.input.Update(msg)
	return formEditing, cmd
}

const labelWidth = 16

func (f *form) lines(s *styles.Styles, w int) []string {
	lines := []string{s.Section.Render(f.title), ""}
	for i, fl := range f.fields {
		mark := "  "
		if i == f.focus {
			mark = "> "
		}
		if f.hasErr(fl.path) {
			mark = mark[:1] + "!"
		}
		label := padRight(fl.label, labelWidth)
		var val string
		switch {
		case !f.visible(i):
			val = s.Muted.Render("(from DHCP)")
		case fl.choices != nil:
			var parts []string
			for j, c := range fl.choices {
				if j == fl.choice {
					parts = append(parts, s.Selected.Render("(*) "+c))
				} else {
					parts = append(parts, "( ) "+c)
				}
			}
			val = strings.Join(parts, "  ")
			if i == f.focus {
				val += s.Muted.Render("   space toggles")
			}
		case i == f.focus:
			fl.input.SetWidth(max(w-labelWidth-6, 10))
			val = "[" + fl.input.View() + "]"
		default:
			v := fl.input.Value()
			if v == "" {
				v = s.Muted.Render(fl.input.Placeholder)
			}
			val = " " + v
		}
		if i == f.focus {
			label = s.Label.Bold(true).Render(label)
		}
		lines = append(lines, mark+label+val)
	}
	if len(f.errs) > 0 {
		lines = append(lines, "")
		for _, e := range f.errs {
			lines = append(lines, wrap(s.Badgef(styles.Failure)+" "+e, w, "       ")...)
		}
	}
	return lines
}

// hasErr reports whether an error names path or a field under it
// (management.addresses[0]).
func (f *form) hasErr(path string) bool {
	for _, e := range f.errs {
		if strings.HasPrefix(e, path+":") || strings.HasPrefix(e, path+"[") || strings.HasPrefix(e, path+".") {
			return true
		}
	}
	return false
}

func padRight(s string, w int) string {
	if n := lipgloss.Width(s); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

// wrap breaks text into lines of at most w cells, continuation lines
// indented.
func wrap(text string, w int, indent string) []string {
	lines := strings.Split(ansi.Wrap(text, max(w, 20), " ,"), "\n")
	for i := 1; i < len(lines); i++ {
		lines[i] = indent + strings.TrimLeft(lines[i], " ")
		if lipgloss.Width(lines[i]) > w {
			rest := strings.Join(lines[i:], " ")
			return append(lines[:i], wrap(rest, w, indent)...)
		}
	}
	return lines
}

// splitList splits a comma- or space-separated list, dropping blanks.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}
