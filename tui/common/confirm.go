package common

import (
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/tui/styles"
)

// Confirmation dialogs. Every action that is hard to undo (delete a VM,
// reboot or power off the host, apply a network change, delete a bridge)
// asks the same way: y confirms, any other key cancels. Cancel is the
// default, so a stray enter, a key meant for another screen or a letter
// typed on the wrong console never does it; and there is one rule to
// learn, worded the same in every dialog.

// Confirmed reports whether a key pressed in a confirmation dialog
// confirms it. Every other key cancels the dialog.
func Confirmed(msg tea.KeyPressMsg) bool {
	s := msg.String()
	return s == "y" || s == "Y"
}

// ConfirmPrompt is the dialog's last line: "Press y to delete web-01; any
// other key cancels." verb says what y does.
func ConfirmPrompt(s *styles.Styles, verb string) string {
	return "Press " + s.HelpKey.Render("y") + " to " + verb + "; any other key cancels."
}

// ConfirmHelp is a dialog's key legend: y and what it does, and the
// cancel that any other key is.
func ConfirmHelp(verb string) []key.Binding {
	return []key.Binding{
		key.NewBinding(key.WithKeys("y", "Y"), key.WithHelp("y", verb)),
		key.NewBinding(key.WithKeys("esc"), key.WithHelp("any other key", "cancels")),
	}
}
