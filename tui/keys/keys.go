// Package keys is the DCUI key map. Every function key has a letter alias,
// because F-keys often do not arrive over IPMI SOL, serial lines or
// browser consoles; the legend always shows both.
//
//	F1  / h / ?   help
//	F2  / l       login (coming soon)
//	F5  / r       refresh now
//	F10 / q       quit (ctrl+c too)
//	ctrl+l        redraw the screen
package keys

import "charm.land/bubbles/v2/key"

// KeyMap is the DCUI's global key map.
type KeyMap struct {
	Help    key.Binding
	Login   key.Binding
	Refresh key.Binding
	Quit    key.Binding
	Redraw  key.Binding
}

// Default returns the key map.
func Default() KeyMap {
	return KeyMap{
		Help:    key.NewBinding(key.WithKeys("f1", "h", "?"), key.WithHelp("F1/h", "help")),
		Login:   key.NewBinding(key.WithKeys("f2", "l"), key.WithHelp("F2/l", "login: coming soon")),
		Refresh: key.NewBinding(key.WithKeys("f5", "r"), key.WithHelp("F5/r", "refresh")),
		Quit:    key.NewBinding(key.WithKeys("f10", "q", "ctrl+c"), key.WithHelp("F10/q", "quit")),
		Redraw:  key.NewBinding(key.WithKeys("ctrl+l"), key.WithHelp("^L", "redraw")),
	}
}

// ShortHelp is the one-line legend.
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Help, k.Login, k.Refresh, k.Quit, k.Redraw}
}

// FullHelp is the help screen, in columns.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Help, k.Login, k.Refresh}, {k.Quit, k.Redraw}}
}
