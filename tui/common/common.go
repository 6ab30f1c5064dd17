package common

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// Common is passed to every component.
type Common struct {
	// Ctx is the session's context: every command's I/O derives from it,
	// so ending the session (a closed web terminal, a signal) cancels what
	// is in flight. Never nil after New.
	Ctx           context.Context
	Width, Height int
	Tier          term.Tier
	Styles        *styles.Styles
	Keys          keys.KeyMap
	// Logger writes to the log file, never the screen.
	Logger *slog.Logger
	// Now is the clock (fixed in tests).
	Now func() time.Time
	// Session is the login of this console, shared by the app and every
	// screen (the app updates it in place). Never nil after New.
	Session *Session
}

// New returns a Common for the session ctx and a tier at the default size.
func New(ctx context.Context, tier term.Tier, logger *slog.Logger) Common {
	w, h := term.Size(0, 0)
	return Common{Ctx: ctx, Width: w, Height: h, Tier: tier, Styles: styles.New(tier), Keys: keys.Default(),
		Logger: logger, Now: time.Now, Session: &Session{}}
}

// Session is who is logged in on this console.
type Session struct {
	// User is the logged-in user; "" when nobody is.
	User string
	// TTY is this console's terminal (tty1, ttyS0, pts/3).
	TTY string
	// Writer: this console holds the host's single-writer console lock,
	// so its actions may change the host.
	Writer bool
	// Holder says who holds the writer lock when Writer is false, for
	// example "alice on tty1 since 09:12".
	Holder string
}

// LoggedIn reports whether somebody is logged in.
func (s *Session) LoggedIn() bool { return s != nil && s.User != "" }

// CanWrite reports whether actions that change the host are allowed.
func (s *Session) CanWrite() bool { return s.LoggedIn() && s.Writer }

// ReadOnlyReason is the text shown when an action is refused because this
// console is read-only.
func (s *Session) ReadOnlyReason() string {
	switch {
	case !s.LoggedIn():
		return "log in first (F2/l)"
	case s.Writer:
		return ""
	case s.Holder != "":
		return "read-only: " + s.Holder + " holds the console lock"
	}
	return "read-only: another console holds the console lock"
}

// Component is a DCUI screen or widget.
type Component interface {
	tea.Model
	// SetSize lays the component out for w x h cells.
	SetSize(w, h int)
	// ShortHelp is the component's part of the key legend.
	ShortHelp() []key.Binding
	// FullHelp is the component's help screen.
	FullHelp() [][]key.Binding
}

// Screen is a page of the DCUI reached after login (Network, VMs, ...).
// The app draws the frame, the header, the CLI line and the legend; a
// screen's View draws only its content area, set with SetSize: at most
// Height lines of at most Width cells (Fit does that).
type Screen interface {
	Component
	// Title names the screen in the header ("Virtual machines").
	Title() string
	// CLI is the `virt` command that does what the screen shows or what
	// its selected action would do ("virt vm start web-01"); the app shows
	// it under the screen so an operator learns the CLI. "" for none.
	CLI() string
	// Capturing reports that the screen takes every key (a text field, a
	// search box or a dialog is focused): the app then passes letters to
	// the screen instead of reading them as navigation. Function keys and
	// ctrl keys stay global.
	Capturing() bool
}

// Messages from the app to screens. Every other message that is not a key
// is delivered to every screen, so a load finishing after the operator
// moved on still lands.
type (
	// ActivateMsg is sent to a screen when it becomes visible: load now.
	ActivateMsg struct{}
	// TickMsg is sent every second to the visible screen only.
	TickMsg struct{ Now time.Time }
	// RefreshMsg is sent to the visible screen on F5/r.
	RefreshMsg struct{}
)

// Fit lays lines out in exactly h lines of exactly w cells: longer lines
// are truncated with the tier's ellipsis, extra lines dropped, short ones
// padded with spaces. ANSI styling is kept.
func Fit(lines []string, w, h int, ellipsis string) string {
	if w < 1 {
		w = 1
	}
	out := make([]string, 0, max(h, 0))
	for i := 0; i < h; i++ {
		l := ""
		if i < len(lines) {
			l = lines[i]
		}
		if strings.Contains(l, "\n") {
			l = strings.ReplaceAll(l, "\n", " ")
		}
		if lipgloss.Width(l) > w {
			l = ansi.Truncate(l, w, ellipsis)
		}
		if pad := w - lipgloss.Width(l); pad > 0 {
			l += strings.Repeat(" ", pad)
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// Messages from screens to the app.
type (
	// ActivityMsg says the operator was active where the app could not
	// see it (in a VM console that had the terminal): the idle timer
	// restarts.
	ActivityMsg struct{}
	// LockMsg asks the app to lock the console now, saying why.
	LockMsg struct{ Why string }
)
