// Package common is what every DCUI component shares: the size, styles,
// key map, logger and clock, and the small interface a component has.
package common

import (
	"log/slog"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// Common is passed to every component.
type Common struct {
	Width, Height int
	Tier          term.Tier
	Styles        *styles.Styles
	Keys          keys.KeyMap
	// Logger writes to the log file, never the screen.
	Logger *slog.Logger
	// Now is the clock (fixed in tests).
	Now func() time.Time
}

// New returns a Common for a tier at the default size.
func New(tier term.Tier, logger *slog.Logger) Common {
	w, h := term.Size(0, 0)
	return Common{Width: w, Height: h, Tier: tier, Styles: styles.New(tier), Keys: keys.Default(), Logger: logger, Now: time.Now}
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
