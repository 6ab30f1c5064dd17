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
package keys

import "charm.land/bubbles/v2/key"

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
		Help:     key.NewBinding(key.WithKeys("f1", "h", "?"), key.WithHelp("F1/h", "help")),
		Login:    key.NewBinding(key.WithKeys("f2", "l"), key.WithHelp("F2/l", "log in")),
		Lock:     key.NewBinding(key.WithKeys("f2", "l"), key.WithHelp("F2/l", "lock")),
		Status:   key.NewBinding(key.WithKeys("f3", "s"), key.WithHelp("F3/s", "status")),
		VMs:      key.NewBinding(key.WithKeys("f4", "v"), key.WithHelp("F4/v", "VMs")),
		Refresh:  key.NewBinding(key.WithKeys("f5", "r"), key.WithHelp("F5/r", "refresh")),
		Network:  key.NewBinding(key.WithKeys("f6", "n"), key.WithHelp("F6/n", "network")),
		Hardware: key.NewBinding(key.WithKeys("f7", "w"), key.WithHelp("F7/w", "hardware")),
		Logs:     key.NewBinding(key.WithKeys("f8", "g"), key.WithHelp("F8/g", "logs")),
		Diag:     key.NewBinding(key.WithKeys("f9", "d"), key.WithHelp("F9/d", "diagnostics")),
		Power:    key.NewBinding(key.WithKeys("f11", "p"), key.WithHelp("F11/p", "power")),
		Logout:   key.NewBinding(key.WithKeys("f12", "x"), key.WithHelp("F12/x", "log out")),
		Quit:     key.NewBinding(key.WithKeys("f10", "q", "ctrl+c"), key.WithHelp("F10/q", "quit")),
		Redraw:   key.NewBinding(key.WithKeys("ctrl+l"), key.WithHelp("^L", "redraw")),
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
