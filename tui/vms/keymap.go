package vms

import (
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/tui/keys"
)

// KeyMap is the screen's own bindings; none uses a globally reserved letter.
// The action keys (Start ... Console) act on the selected VM in the list and
// pick the item in the action menu alike.
type KeyMap struct {
	Up, Down, PageUp, PageDown, Home, End key.Binding
	Menu, Start, Stop, ForceStop, Reboot  key.Binding
	Delete, Console, Autostart            key.Binding
	// day-2: the VM's snapshots panel, and its clone form
	Snapshots, Clone key.Binding
	// the action menu's own keys, and the console's way out
	Choose, Close, Detach key.Binding
	// the snapshots panel's keys: take one (a name and memory prompt),
	// restore or delete the highlighted one (each asks first)
	SnapCreate, SnapRestore, SnapDelete key.Binding
	// the name forms' keys: the next field, the toggle, submit
	NextField, Toggle, Submit key.Binding
}

var _ keys.Map = KeyMap{}

// action is the binding of a lifecycle action.
func (k KeyMap) action(a action) key.Binding {
	switch a {
	case actStart:
		return k.Start
	case actStop:
		return k.Stop
	case actForceStop:
		return k.ForceStop
	case actReboot:
		return k.Reboot
	case actDelete:
		return k.Delete
	case actConsole:
		return k.Console
	case actAutostart:
		return k.Autostart
	case actSnapshots:
		return k.Snapshots
	case actClone:
		return k.Clone
	}
	return key.Binding{}
}

// actions is the bindings of the menu's items, in its order.
func (k KeyMap) actions() []key.Binding {
	bs := make([]key.Binding, len(menuItems))
	for i, it := range menuItems {
		bs[i] = k.action(it.act)
	}
	return bs
}

// menuLetters is the legend's one entry for the menu's action keys: the
// letters of the list's bindings ("a/o/f/b/D/c pick").
func (k KeyMap) menuLetters() key.Binding {
	var ks, letters []string
	for _, b := range k.actions() {
		ks = append(ks, b.Keys()...)
		letters = append(letters, lastAlias(b.Help().Key))
	}
	return key.NewBinding(key.WithKeys(ks...), key.WithHelp(strings.Join(letters, "/"), "pick"))
}

// lastAlias is the letter of a help key such as "Del/D".
func lastAlias(k string) string {
	if i := strings.LastIndex(k, "/"); i >= 0 {
		return k[i+1:]
	}
	return k
}

// DefaultKeyMap returns the screen's bindings.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		Up:        keys.On("up", "k").Help("up/k", "up"),
		Down:      keys.On("down", "j").Help("dn/j", "down"),
		PageUp:    keys.On("pgup").Help("pgup", "page up"),
		PageDown:  keys.On("pgdown").Help("pgdn", "page down"),
		Home:      keys.On("home").Help("home", "first"),
		End:       keys.On("end").Help("end", "last"),
		Menu:      keys.On("enter").Help("enter", "menu"),
		Start:     keys.On("a").Help("a", "start"),
		Stop:      keys.On("o").Help("o", "stop"),
		ForceStop: keys.On("f").Help("f", "force stop"),
		Reboot:    keys.On("b").Help("b", "reboot"),
		Delete:    keys.On("delete", "D").Help("Del/D", "delete"),
		Console:   keys.On("c").Help("c", "console"),
		Autostart: keys.On("t").Help("t", "autostart on/off"),
		Snapshots: keys.On("z").Help("z", "snapshots"),
		Clone:     keys.On("u").Help("u", "clone"),

		Choose: keys.On("enter").Help("enter", "choose"),
		Close:  keys.On("esc").Help("esc", "close"),
		Detach: keys.On("ctrl+]").Help("^]", "leave the console (the VM keeps running)"),

		SnapCreate:  keys.On("c").Help("c", "take a snapshot"),
		SnapRestore: keys.On("enter").Help("enter", "restore (asks)"),
		SnapDelete:  keys.On("delete", "D").Help("Del/D", "delete (asks)"),

		NextField: keys.On("tab", "up", "down").Help("tab", "next field"),
		Toggle:    keys.On("space").Help("space", "toggle"),
		Submit:    keys.On("enter").Help("enter", "ok"),
	}
}

// ShortHelp is the list's legend; it fits one 76-column line (Autostart,
// which would not, is in the menu and the help screen).
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Menu, k.Start, k.Stop, k.ForceStop, k.Reboot, k.Delete, k.Console}
}

// FullHelp is the screen's help: the list, the actions, the menu.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Home, k.End},
		{k.Menu, k.Start, k.Stop, k.ForceStop, k.Reboot, k.Autostart, k.Delete, k.Console, k.Snapshots, k.Clone, k.Detach},
		{k.Choose, k.menuLetters(), k.Close},
		{k.SnapCreate, k.SnapRestore, k.SnapDelete, k.NextField, k.Toggle, k.Submit},
	}
}

func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	switch {
	case m.confirm != nil:
		return m.confirmKey(msg)
	case m.form != nil:
		return m.formKey(msg)
	case m.snaps != nil:
		return m.snapsKey(msg)
	case m.menu != nil:
		return m.menuKey(msg)
	}
	k := m.keys
	switch {
	case key.Matches(msg, k.Up):
		m.cursor--
	case key.Matches(msg, k.Down):
		m.cursor++
	case key.Matches(msg, k.PageUp):
		m.cursor -= m.listRows()
	case key.Matches(msg, k.PageDown):
		m.cursor += m.listRows()
	case key.Matches(msg, k.Home):
		m.cursor = 0
	case key.Matches(msg, k.End):
		m.cursor = len(m.entries) - 1
	case key.Matches(msg, k.Menu):
		m.openMenu()
	case key.Matches(msg, k.Start):
		return m.request(actStart)
	case key.Matches(msg, k.Stop):
		return m.request(actStop)
	case key.Matches(msg, k.ForceStop):
		return m.request(actForceStop)
	case key.Matches(msg, k.Reboot):
		return m.request(actReboot)
	case key.Matches(msg, k.Delete):
		return m.request(actDelete)
	case key.Matches(msg, k.Console):
		return m.request(actConsole)
	case key.Matches(msg, k.Autostart):
		return m.request(actAutostart)
	case key.Matches(msg, k.Snapshots):
		return m.request(actSnapshots)
	case key.Matches(msg, k.Clone):
		return m.request(actClone)
	case msg.String() == "esc":
		m.msg = ""
	}
	m.scrollToCursor()
	return nil
}
