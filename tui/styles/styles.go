package styles

import (
	"image/color"

	"charm.land/bubbles/v2/textinput"
	"charm.land/lipgloss/v2"

	"github.com/virtcon/virtcon/tui/term"
)

// Level is the severity a badge shows.
type Level int

// Levels, in increasing severity.
const (
	OK Level = iota
	Info
	Warning
	Failure
	Unknown
)

// Word is the status word of a level. It is always printed, in every tier,
// so colour is never the only signal.
func (l Level) Word() string {
	switch l {
	case OK:
		return "PASS"
	case Info:
		return "INFO"
	case Warning:
		return "WARN"
	case Failure:
		return "FAIL"
	}
	return "????"
}

// Styles is the style set of one tier.
type Styles struct {
	Tier term.Tier
	// Border frames the screen: rounded (rich), single-line (linux, in
	// the VGA font) or ASCII (plain).
	Border lipgloss.Border
	Frame  lipgloss.Style
	// Title is the product line; Section a heading; Label a field name;
	// Value its value; Muted secondary text; Hint advice under a check.
	Title, Section, Label, Value, Muted, Hint lipgloss.Style
	// Selected is the highlighted row of a list or menu, and the focused
	// button of a dialog. Lists also mark it with "> ", so it shows
	// without colour.
	Selected lipgloss.Style
	// Match is a search match inside text (reverse video, so it shows
	// on a serial line too).
	Match lipgloss.Style
	// Badges by level.
	Badge map[Level]lipgloss.Style
	// HelpKey and HelpDesc render the key legend.
	HelpKey, HelpDesc lipgloss.Style
	// Ellipsis ends truncated text: "…" where the font has it, "~" otherwise.
	Ellipsis string
	// Bullet starts list lines.
	Bullet string
}

// palette maps the few colours the DCUI uses.
type palette struct {
	accent, ok, info, warn, fail, muted color.Color
}

// New returns the styles of a tier.
func New(t term.Tier) *Styles {
	s := &Styles{Tier: t, Ellipsis: "~", Bullet: "-"}
	var p *palette
	switch t {
	case term.Rich:
		s.Border = lipgloss.RoundedBorder()
		s.Ellipsis = "…"
		s.Bullet = "•"
		p = &palette{
			accent: lipgloss.Color("#5FAFFF"), ok: lipgloss.Color("#5FD75F"),
			info: lipgloss.Color("#87AFD7"), warn: lipgloss.Color("#FFAF00"),
			fail: lipgloss.Color("#FF5F5F"), muted: lipgloss.Color("#8A8A8A"),
		}
	case term.Linux:
		s.Border = lipgloss.NormalBorder()
		p = &palette{
			accent: lipgloss.ANSIColor(14), ok: lipgloss.ANSIColor(10),
			info: lipgloss.ANSIColor(12), warn: lipgloss.ANSIColor(11),
			fail: lipgloss.ANSIColor(9), muted: lipgloss.ANSIColor(7),
		}
	default:
		s.Border = lipgloss.ASCIIBorder()
	}
	base := lipgloss.NewStyle()
	s.Frame = base.Border(s.Border)
	s.Title = base.Bold(true)
	s.Section = base.Bold(true)
	s.Label = base
	s.Value = base
	s.Muted = base
	s.Hint = base
	s.Selected = base.Bold(true)
	s.Match = base.Reverse(true)
	s.HelpKey = base.Bold(true)
	s.HelpDesc = base
	s.Badge = map[Level]lipgloss.Style{
		OK: base, Info: base, Warning: base.Bold(true), Failure: base.Bold(true), Unknown: base,
	}
	if p != nil {
		s.Frame = s.Frame.BorderForeground(p.accent)
		s.Title = s.Title.Foreground(p.accent)
		s.Section = s.Section.Foreground(p.accent)
		s.Muted = s.Muted.Foreground(p.muted)
		s.Hint = s.Hint.Foreground(p.warn)
		s.Selected = s.Selected.Foreground(p.accent)
		s.Match = s.Match.Foreground(p.warn)
		s.HelpKey = s.HelpKey.Foreground(p.accent)
		s.HelpDesc = s.HelpDesc.Foreground(p.muted)
		s.Badge[OK] = s.Badge[OK].Foreground(p.ok)
		s.Badge[Info] = s.Badge[Info].Foreground(p.info)
		s.Badge[Warning] = s.Badge[Warning].Foreground(p.warn)
		s.Badge[Failure] = s.Badge[Failure].Foreground(p.fail)
		s.Badge[Unknown] = s.Badge[Unknown].Foreground(p.muted)
	}
	return s
}

// Badgef renders "[WORD]" for a level: the word is there in every tier.
func (s *Styles) Badgef(l Level) string {
	return s.Badge[l].Render("[" + l.Word() + "]")
}

// TextInput is the style of text fields: the tier's plain text, a steady
// reverse-video cursor (a blinking one costs a redraw twice a second, too
// much for a serial line), no colours of bubbles' own.
func (s *Styles) TextInput() textinput.Styles {
	st := textinput.Styles{Cursor: textinput.CursorStyle{Blink: false}}
	st.Focused.Text, st.Blurred.Text = s.Value, s.Value
	st.Focused.Placeholder, st.Blurred.Placeholder = s.Muted, s.Muted
	st.Focused.Prompt, st.Blurred.Prompt = s.Label, s.Label
	return st
}
