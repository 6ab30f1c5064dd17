package network

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

// A part is one mode of the screen: the overview, an edit form, the
// review of a change, the trial apply, the "keep these settings?" dialog,
// the NIC picker of the DHCP reset, the delete dialog, the test results.
// The screen draws the part of its mode, shows that part's legend and CLI
// line, and hands it the keys.
type part interface {
	// SetSize lays the part out for w x h cells.
	SetSize(w, h int)
	// Update answers a key. A part changes only itself and the message
	// line; what needs the rest of the screen (another mode, a host
	// call) it returns as an intent, which the screen carries out
	// before its own Update returns, so the next key already lands in
	// the next mode. cmd is the part's own (a text field's).
	Update(msg tea.KeyPressMsg) (next intent, cmd tea.Cmd)
	// Lines is the part's content, fitted by the screen.
	Lines() []string
	// ShortHelp is the part's key legend, one 76-column line.
	ShortHelp() []key.Binding
	// CLI is the virt command for what the part shows or is about to do.
	CLI() string
	// Capturing reports that the part takes every key.
	Capturing() bool
}

// An intent is what a part asks of the screen: one of the types below,
// or nil for nothing.
type intent any

type (
	// toOverview closes the part; it has said why on the message line.
	toOverview struct{}
	// openForm opens the form of the management interface, of a new
	// bridge, or of the bridge at index bridge.
	openForm struct {
		kind   formKind
		bridge int
	}
	// openDelete asks before deleting the bridge named name.
	openDelete struct{ name string }
	// openNICs lists the NICs a DHCP reset can pick.
	openNICs struct{}
	// toReview shows the change from base to next and asks to apply it
	// on trial; note, when set, is a warning above the changes.
	toReview struct {
		base, next      *netcfg.Config
		what, cli, note string
	}
	// applyChange applies the change under review on trial.
	applyChange struct{ edit *edit }
	// runTest runs the management test; fresh shows its results from
	// the start (from the overview), else they stay until the new ones
	// arrive (t on the results).
	runTest struct{ fresh bool }
	// keepTrial keeps the change on trial.
	keepTrial struct{}
	// rollBack rolls the change on trial back now.
	rollBack struct{}
)

// size is a part's content area.
type size struct{ w, h int }

// SetSize lays the part out for w x h cells.
func (s *size) SetSize(w, h int) { s.w, s.h = w, h }

// shared is what every part reads and the screen keeps current: the
// console, the files and the host as last loaded, the try on trial and
// the message line.
type shared struct {
	c    common.Common
	opts Options
	keys KeyMap

	desired, applied *netcfg.Config
	state            *netcfg.State
	pending          *netcfg.Pending
	loadErr          error
	loaded           bool

	// fallback is what the DHCP reset (z) starts from while the desired
	// file does not load, and fallbackWhy says why: the reset is the way
	// back from a broken file.
	fallback    *netcfg.Config
	fallbackWhy string

	// acting: a keep or a roll back of the try is under way.
	acting bool

	msg      string
	msgLevel styles.Level
}

func (s *shared) say(l styles.Level, format string, args ...any) {
	s.msg, s.msgLevel = s.clean(fmt.Sprintf(format, args...)), l
}

// clean makes host text safe to draw: link names come from the kernel,
// errors quote them and the file. ASCII only in the plain tier.
func (s *shared) clean(text string) string { return common.Clean(text, s.c.Tier == term.Plain) }

func (s *shared) log(msg string, args ...any) {
	if s.c.Logger != nil {
		s.c.Logger.Info("network screen: "+msg, args...)
	}
}

// mayWrite refuses, with the console's reason, when it is read-only.
func (s *shared) mayWrite() bool {
	if s.c.Session.CanWrite() {
		return true
	}
	s.say(styles.Warning, "%s", s.c.Session.ReadOnlyReason())
	return false
}

func (s *shared) dots() string {
	if s.c.Styles.Ellipsis == "~" {
		return "..."
	}
	return s.c.Styles.Ellipsis
}

// message is the message line, "" when there is none.
func (s *shared) message() string {
	if s.msg == "" {
		return ""
	}
	return s.c.Styles.Badgef(s.msgLevel) + " " + s.msg
}

// messageLines is the message wrapped to w cells in at most room lines
// (at least one), none when there is no message: a worded error says
// what to do after what happened, which one line would cut off. What
// does not fit goes on the last line, which the screen cuts with an
// ellipsis.
func (s *shared) messageLines(w, room int) []string {
	msg := s.message()
	if msg == "" {
		return nil
	}
	indent := strings.Repeat(" ", lipgloss.Width(s.c.Styles.Badgef(s.msgLevel)+" "))
	lines := wrap(msg, w, indent)
	if room = max(room, 1); len(lines) > room {
		rest := lines[room-1:]
		for i := 1; i < len(rest); i++ {
			rest[i] = strings.TrimLeft(rest[i], " ")
		}
		lines = append(lines[:room-1], strings.Join(rest, " "))
	}
	return lines
}

func (s *shared) mgmtInterface() string {
	if s.desired == nil || s.desired.Management == nil {
		return ""
	}
	return s.desired.Management.Interface
}
