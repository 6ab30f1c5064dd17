package app

import (
	"errors"
	"fmt"
	"time"

	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/tui/styles"
)

// loginForm is the user name and password form. The password lives only
// in the text field until it is submitted; the field is cleared then.
type loginForm struct {
	s          *styles.Styles
	user, pass textinput.Model
	focused    int
	err, hint  string
}

func newLoginForm(s *styles.Styles, user string) *loginForm {
	f := &loginForm{s: s, user: textinput.New(), pass: textinput.New()}
	for _, ti := range []*textinput.Model{&f.user, &f.pass} {
		ti.Prompt = ""
		ti.CharLimit = 256
		ti.SetWidth(32)
		ti.SetStyles(s.TextInput())
	}
	f.pass.EchoMode = textinput.EchoPassword
	f.pass.EchoCharacter = '*'
	f.user.SetValue(user)
	f.user.CursorEnd()
	if user != "" {
		f.focused = 1
	}
	return f
}

func (f *loginForm) setWidth(w int) {
	fw := min(32, max(w-16, 8))
	f.user.SetWidth(fw)
	f.pass.SetWidth(fw)
}

func (f *loginForm) focus() tea.Cmd { return f.focusIndex(f.focused) }

func (f *loginForm) focusIndex(i int) tea.Cmd {
	f.focused = i
	f.user.Blur()
	f.pass.Blur()
	if i == 0 {
		return f.user.Focus()
	}
	return f.pass.Focus()
}

func (f *loginForm) next() tea.Cmd { return f.focusIndex(1 - f.focused) }

func (f *loginForm) update(msg tea.Msg) tea.Cmd {
	var cmd tea.Cmd
	if f.focused == 0 {
		f.user, cmd = f.user.Update(msg)
	} else {
		f.pass, cmd = f.pass.Update(msg)
	}
	return cmd
}

func (f *loginForm) field(label string, ti textinput.Model, focused bool) string {
	open, closeB := "[", "]"
	mark := "  "
	if focused {
		mark = "> "
	}
	return mark + f.s.Label.Render(fmt.Sprintf("%-9s", label)) + " " + open + padRight(ti.View(), ti.Width()) + closeB
}

func padRight(s string, w int) string {
	for n := lipgloss.Width(s); n < w; n++ {
		s += " "
	}
	return s
}

func (f *loginForm) lines(busy bool, tty, group string) []string {
	s := f.s
	lines := []string{
		s.Title.Render("Log in to manage this host"),
		s.Muted.Render("Only root and members of group " + group + " may log in. Console: " + orDash(tty)),
		"",
		f.field("User", f.user, f.focused == 0),
		f.field("Password", f.pass, f.focused == 1),
		"",
	}
	switch {
	case busy:
		lines = append(lines, "  checking"+dots(s)+" (PAM service)")
	case f.err != "":
		lines = append(lines, "  "+s.Badgef(styles.Failure)+" "+f.err)
		if f.hint != "" {
			lines = append(lines, "         "+s.Hint.Render(f.hint))
		}
	}
	return lines
}

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
}

// Describe turns a login error into the line shown under the form and a
// hint. Wrong user and wrong password read the same, so the form does not
// tell which user names exist.
func Describe(err error, group string) (msg, hint string) {
	var rl *auth.RateLimitError
	switch {
	case errors.As(err, &rl):
		return fmt.Sprintf("too many failed logins: try again in %s", rl.RetryAfter.Round(time.Second)), ""
	case errors.Is(err, auth.ErrBadCredentials):
		return "Login incorrect", "check Caps Lock and the keyboard layout"
	case errors.Is(err, auth.ErrNotAdmin):
		return "not allowed: only root and members of group " + group + " may manage this host", ""
	case errors.Is(err, auth.ErrAccount):
		return "account refused: " + err.Error(), "ask an administrator to check the account (expired or locked?)"
	}
	return "login failed: " + err.Error(), ""
}
