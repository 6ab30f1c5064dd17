// Package keys is the DCUI key map. Every function key has a letter alias,
// because F-keys often do not arrive over IPMI SOL, serial lines or
// browser consoles; the legend always shows both.
//
//	F1  / h / ?   help
//	F2  / l       log in; when logged in: lock the console
//	F3  / s       status screen
//	F4  / v       virtual machines
//	F5  / r       refresh now
//	F6  / n       network
//	F7  / w       hardware
//	F8  / g       logs
//	F9  / d       diagnostics
//	F11 / p       power (reboot, shut down)
//	F12 / x       log out
//	F10 / q       quit (ctrl+c too; not on the host console)
//	ctrl+l        redraw the screen
//
// Letters the global map uses (h l s v r n w g d p x q) are reserved while
// no text field is focused; screens use the others (a b c e f i j k m o t
// u y z, digits, enter, esc, arrows, tab, /) for their own actions, in
// their menus and dialogs too: a menu takes every key while it is open,
// so a global letter bound there would shadow the global key (x would
// delete instead of logging out). tui/dcui's TestScreenKeysAvoidGlobalKeys
// walks every screen's key map against this one.
//
// # One form for every key map
//
// The global map and each screen's have the same shape (soft-serve's and
// bubbles' help.KeyMap): a KeyMap struct with one key.Binding per action,
// those of the screen's menus, forms and dialogs included, each built with
// On(...).Help(...) so its legend text sits beside its keys; a
// DefaultKeyMap (here Default) that fills it; and the Map methods,
// ShortHelp for the legend of the main view and FullHelp for the help
// screen's columns. A screen keeps its map in a field named keys, answers
// FullHelp with the map's, and ShortHelp with the map's unless a menu,
// form or dialog is open, whose legend it picks from the same map (or
// common.ConfirmHelp for a y/any-other-key confirmation).
package keys

import "charm.land/bubbles/v2/key"

// Map is what every key map gives: the legend of its main view and the
// help screen, in columns.
type Map interface {
	ShortHelp() []key.Binding
	FullHelp() [][]key.Binding
}

// Keys are the keys of a binding before its legend is written.
type Keys []string

// On starts a binding pressed by any of ks (key names as
// tea.KeyPressMsg.String spells them): keys.On("up", "k").Help("up/k", "up").
func On(ks ...string) Keys { return Keys(ks) }

// Help finishes the binding with its legend: legend is how the legend
// writes the keys ("up/k", "F1/h"), desc what they do.
func (k Keys) Help(legend, desc string) key.Binding {
	return key.NewBinding(key.WithKeys(k...), key.WithHelp(legend, desc))
}

var _ Map = KeyMap{}

// KeyMap is the DCUI's global key map.
type KeyMap struct {
	Help     key.Binding
	Login    key.Binding
	Lock     key.Binding
	Status   key.Binding
	VMs      key.Binding
	Refresh  key.Binding
	Network  key.Binding
	Hardware key.Binding
	Logs     key.Binding
	Diag     key.Binding
	Power    key.Binding
	Logout   key.Binding
	Quit     key.Binding
	Redraw   key.Binding
}

// Reserved are the letters the global map takes while no field is focused.
const Reserved = "hlsvrnwgdpxq?"

// Default returns the key map.
func Default() KeyMap {
	return KeyMap{
		Help:     On("f1", "h", "?").Help("F1/h", "help"),
		Login:    On("f2", "l").Help("F2/l", "log in"),
		Lock:     On("f2", "l").Help("F2/l", "lock"),
		Status:   On("f3", "s").Help("F3/s", "status"),
		VMs:      On("f4", "v").Help("F4/v", "VMs"),
		Refresh:  On("f5", "r").Help("F5/r", "refresh"),
		Network:  On("f6", "n").Help("F6/n", "network"),
		Hardware: On("f7", "w").Help("F7/w", "hardware"),
		Logs:     On("f8", "g").Help("F8/g", "logs"),
		Diag:     On("f9", "d").Help("F9/d", "diagnostics"),
		Power:    On("f11", "p").Help("F11/p", "power"),
		Logout:   On("f12", "x").Help("F12/x", "log out"),
		Quit:     On("f10", "q", "ctrl+c").Help("F10/q", "quit"),
		Redraw:   On("ctrl+l").Help("^L", "redraw"),
	}
}

// ShortHelp is the one-line legend of the status screen before login.
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Help, k.Login, k.Refresh, k.Quit, k.Redraw}
}

// All is every global binding, for tests and the help screen.
func (k KeyMap) All() []key.Binding {
	return []key.Binding{k.Help, k.Login, k.Lock, k.Status, k.VMs, k.Refresh, k.Network, k.Hardware,
		k.Logs, k.Diag, k.Power, k.Logout, k.Quit, k.Redraw}
}

// FullHelp is the help screen, in columns.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Help, k.Login, k.Status, k.VMs, k.Network, k.Hardware, k.Logs},
		{k.Diag, k.Power, k.Refresh, k.Logout, k.Quit, k.Redraw},
	}
}
