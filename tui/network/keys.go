package network

import (
	"charm.land/bubbles/v2/key"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
)

// KeyMap is the screen's keys, those of its forms and dialogs too. None
// that the overview binds is a letter the global map reserves.
type KeyMap struct {
	// the overview
	Edit, Add, Open, Delete, Test, Reset, Confirm, Rollback, Up, Down key.Binding
	// an edit form
	Next, Prev, Submit, Cancel key.Binding
	// the keep dialog
	Keep, Back, Buttons, Activate key.Binding
	// the NIC picker and the test results
	Pick, Retest, Close key.Binding
}

var _ keys.Map = KeyMap{}

// DefaultKeyMap returns the screen's keys.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		Edit:     keys.On("e").Help("e", "edit mgmt"),
		Add:      keys.On("a").Help("a", "add bridge"),
		Open:     keys.On("enter").Help("enter", "edit"),
		Delete:   keys.On("delete", "-").Help("-/del", "delete"),
		Test:     keys.On("t").Help("t", "test"),
		Reset:    keys.On("z").Help("z", "DHCP reset"),
		Confirm:  keys.On("c").Help("c", "keep trial"),
		Rollback: keys.On("b").Help("b", "roll back"),
		Up:       keys.On("up", "k").Help("up/k", "up"),
		Down:     keys.On("down", "j").Help("down/j", "down"),

		Next:   keys.On("tab").Help("tab", "next field"),
		Prev:   keys.On("shift+tab").Help("shift+tab", "previous"),
		Submit: keys.On("ctrl+s").Help("^S/enter", "review"),
		Cancel: keys.On("esc").Help("esc", "cancel"),

		Keep:     keys.On("k").Help("k", "keep"),
		Back:     keys.On("b", "esc").Help("b/esc", "roll back now"),
		Buttons:  keys.On("left", "right").Help("left/right", "button"),
		Activate: keys.On("enter").Help("enter", "press button"),

		Pick:   keys.On("enter").Help("enter", "pick"),
		Retest: keys.On("t").Help("t", "test again"),
		Close:  keys.On("esc").Help("esc", "close"),
	}
}

// ShortHelp is the overview's legend while no change is on trial.
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Edit, k.Add, k.Open, k.Delete, k.Test, k.Reset}
}

// FullHelp is every key of the screen, by mode: the overview, the forms,
// the dialogs.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Edit, k.Add, k.Open, k.Delete, k.Test, k.Reset, k.Confirm, k.Rollback, k.Up, k.Down},
		{k.Next, k.Prev, k.Submit, k.Cancel},
		append(common.ConfirmHelp("apply or delete"), k.Keep, k.Back, k.Buttons, k.Activate),
	}
}
