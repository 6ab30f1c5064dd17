package vms

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/vm"
)

type menuState struct {
	key string // the VM it was opened for
	idx int
}

type confirmState struct {
	act action
	e   vm.Entry
}

func (m *Model) openMenu() {
	e, ok := m.selected()
	if !ok {
		return
	}
	if why := notOurs(e); why != "" {
		m.warn(why)
		return
	}
	idx := 0 // start
	if running(e) {
		idx = 1 // stop
	}
	m.menu = &menuState{key: entryKey(e), idx: idx}
}

func (m *Model) menuKey(msg tea.KeyPressMsg) tea.Cmd {
	s := msg.String()
	switch s {
	case "esc":
		m.menu = nil
		return nil
	case "up", "k":
		m.menu.idx = (m.menu.idx + len(menuItems) - 1) % len(menuItems)
		return nil
	case "down", "j", "tab":
		m.menu.idx = (m.menu.idx + 1) % len(menuItems)
		return nil
	case "enter":
		return m.pick(menuItems[m.menu.idx].act)
	}
	for _, it := range menuItems {
		if key.Matches(msg, m.keys.action(it.act)) {
			return m.pick(it.act)
		}
	}
	return nil
}

// pick closes the menu and requests the action on the VM it was opened for.
func (m *Model) pick(a action) tea.Cmd {
	k := m.menu.key
	m.menu = nil
	e, ok := m.find(k)
	if !ok {
		m.warn("the VM is gone from the list")
		return nil
	}
	return m.requestFor(a, e)
}

// confirmKey answers the dialog as every confirmation does: y confirms,
// any other key cancels.
func (m *Model) confirmKey(msg tea.KeyPressMsg) tea.Cmd {
	if common.Confirmed(msg) {
		return m.confirmed()
	}
	c := m.confirm
	m.confirm = nil
	m.info(c.e.Name + ": " + c.act.verb() + " cancelled")
	return nil
}

func (m *Model) confirmed() tea.Cmd {
	c := m.confirm
	m.confirm = nil
	// the world may have changed while the dialog was open
	if !m.c.Session.CanWrite() {
		m.warn(m.c.Session.ReadOnlyReason())
		return nil
	}
	return m.run(c.act, c.e)
}

func (m *Model) menuBox() []string {
	s := m.c.Styles
	e, _ := m.find(m.menu.key)
	lines := []string{s.Section.Render(m.clean(e.Name)) + " " + s.Muted.Render("("+e.Phase+")"), ""}
	kw := 0
	for _, b := range m.keys.actions() {
		kw = max(kw, lipgloss.Width(b.Help().Key))
	}
	for i, it := range menuItems {
		l := fmt.Sprintf("%-*s %s", kw, m.keys.action(it.act).Help().Key, menuLabel(it.act, it.label, e))
		if i == m.menu.idx {
			lines = append(lines, s.Selected.Render("> "+l))
		} else {
			lines = append(lines, "  "+l)
		}
	}
	return m.box(append(lines, "", s.Muted.Render("enter choose  esc close")))
}

func (m *Model) confirmBox() []string {
	s := m.c.Styles
	name := m.clean(m.confirm.e.Name)
	var title string
	var what []string
	switch m.confirm.act {
	case actForceStop:
		title = "Force stop VM " + name + "?"
		what = []string{"QEMU quits at once, like pulling the power cable:", "the guest loses what it has not written to disk."}
	case actReboot:
		title = "Reset VM " + name + "?"
		what = []string{"A hard reset, like the reset button: the guest", "loses what it has not written to disk."}
	default:
		title = "Delete VM " + name + "?"
		what = []string{"Its spec, disks, seed ISO and logs are removed.", "This cannot be undone."}
	}
	lines := append([]string{s.Badgef(styles.Warning) + " " + s.Section.Render(title), ""}, what...)
	return m.box(append(lines, "", common.ConfirmPrompt(s, m.confirm.act.verb()+" "+name)))
}

// box frames lines with the tier's border and one space of padding.
func (m *Model) box(lines []string) []string {
	s := m.c.Styles
	w := 0
	for _, l := range lines {
		w = max(w, lipgloss.Width(l))
	}
	w = min(w, m.c.Width-4)
	for i, l := range lines {
		lines[i] = " " + m.cell(l, w) + " "
	}
	return strings.Split(s.Frame.Render(strings.Join(lines, "\n")), "\n")
}

// overlay draws box centred over base; the rows it covers lose their
// styling so the box stands out in every tier.
func overlay(base, box []string, w int) []string {
	bw := 0
	for _, l := range box {
		bw = max(bw, lipgloss.Width(l))
	}
	x := max((w-bw)/2, 0)
	y := max((len(base)-len(box))/2, 0)
	for i, l := range box {
		if y+i >= len(base) {
			break
		}
		plain := ansi.Strip(base[y+i])
		base[y+i] = ansi.Cut(plain, 0, x) + l + ansi.Cut(plain, x+lipgloss.Width(l), w)
	}
	return base
}

// menuLabel is a menu item's label for the VM e: the autostart toggle
// says what it will do.
func menuLabel(a action, label string, e vm.Entry) string {
	if a != actAutostart {
		return label
	}
	if e.Autostart {
		return "Turn autostart off"
	}
	return "Turn autostart on"
}
