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
	Director key.Binding
	Logout   key.Binding
	Quit     key.Binding
	Redraw   key.Binding
}

// Reserved are the letters the global map takes while no field is focused.
const Reserved = "hlsvrnwgdpmxq?"

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
		// F1-F12 are all taken: the director has a letter only
		Director: On("m").Help("m", "director"),
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
		k.Logs, k.Diag, k.Power, k.Director, k.Logout, k.Quit, k.Redraw}
}

// FullHelp is the help screen, in columns.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Help, k.Login, k.Status, k.VMs, k.Network, k.Hardware, k.Logs},
		{k.Diag, k.Power, k.Director, k.Refresh, k.Logout, k.Quit, k.Redraw},
	}
}
