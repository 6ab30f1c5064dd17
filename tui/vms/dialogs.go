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
	// d is the snapshot restore or delete asked about (act is its act)
	d *day2
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
	what := c.act.verb()
	if c.d != nil {
		what += " of snapshot " + fmt.Sprintf("%q", c.d.name)
	}
	m.info(c.e.Name + ": " + what + " cancelled")
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
	if c.d != nil {
		return m.runDay2(*c.d)
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
	case actSnapRestore:
		title, what = m.restoreWarning(name)
	case actSnapDelete:
		title = "Delete snapshot " + m.clean(m.confirm.d.name) + " of " + name + "?"
		what = []string{"The VM's disks keep their current state; the", "snapshot's data is freed. This cannot be undone."}
	default:
		title = "Delete VM " + name + "?"
		what = []string{"Its spec, disks, seed ISO and logs are removed.", "This cannot be undone."}
	}
	lines := append([]string{s.Badgef(styles.Warning) + " " + s.Section.Render(title), ""}, what...)
	verb := m.confirm.act.verb() + " " + name
	if m.confirm.d != nil {
		verb = m.confirm.act.verb() + " " + m.clean(m.confirm.d.name)
	}
	return m.box(append(lines, "", common.ConfirmPrompt(s, verb)))
}

// restoreWarning is the restore confirmation's title and text: a running
// VM gets the stronger one, since it loses its present state at once.
func (m *Model) restoreWarning(name string) (string, []string) {
	d := m.confirm.d
	snap := m.clean(d.name)
	title := "Restore " + name + " to snapshot " + snap + "?"
	if !running(d.e) {
		what := []string{"Its disks go back to the snapshot: whatever was", "written since is lost. This cannot be undone."}
		if d.flag {
			// the core starts it: the guest resumes where it was
			what = append(what, "It then starts, and resumes where it was.")
		}
		return title, what
	}
	if d.flag { // a memory snapshot
		return title, []string{"THE VM IS RUNNING. Its memory and disks are", "replaced by the snapshot's at once: everything the",
			"guest did since is lost. This cannot be undone."}
	}
	return title, []string{"THE VM IS RUNNING. It is powered off at once (no", "shutdown), its disks go back to the snapshot and",
		"it starts again: everything since is lost, running", "programs included. This cannot be undone."}
}

// formKind is what a name form makes.
type formKind int

const (
	formSnapshot formKind = iota + 1
	formClone
)

// formState is the snapshot or clone form: a name and one toggle (with
// memory; linked).
type formState struct {
	kind   formKind
	e      vm.Entry
	name   []rune
	toggle bool
	focus  int // 0 the name, 1 the toggle
	err    string
}

// maxNameLen bounds what the name field takes.
const maxNameLen = 63

func (f *formState) day2() day2 {
	a := actSnapCreate
	if f.kind == formClone {
		a = actClone
	}
	return day2{act: a, e: f.e, name: string(f.name), flag: f.toggle}
}

func (m *Model) formKey(msg tea.KeyPressMsg) tea.Cmd {
	f, k := m.form, m.keys
	switch {
	case key.Matches(msg, k.Close):
		m.form = nil
		return nil
	case key.Matches(msg, k.Submit):
		return m.submitForm()
	case key.Matches(msg, k.NextField):
		f.focus = 1 - f.focus
		return nil
	case f.focus == 1 && key.Matches(msg, k.Toggle):
		f.toggle = !f.toggle
		return nil
	case f.focus == 0 && msg.String() == "backspace":
		if len(f.name) > 0 {
			f.name = f.name[:len(f.name)-1]
		}
		f.err = ""
		return nil
	case f.focus == 0 && msg.Text != "" && msg.Mod&^tea.ModShift == 0:
		for _, r := range msg.Text {
			if len(f.name) < maxNameLen && r > ' ' && r < 0x7f {
				f.name = append(f.name, r)
			}
		}
		f.err = ""
	}
	return nil
}

// submitForm checks the name as the core would and runs the operation;
// a bad name stays in the form with the reason.
func (m *Model) submitForm() tea.Cmd {
	f := m.form
	d := f.day2()
	if f.kind == formSnapshot {
		if fe := vm.ValidateSnapshotName(d.name); fe != nil {
			f.err = fe.Msg
			if d.name == "" {
				f.err = "give the snapshot a name"
			}
			return nil
		}
	} else if d.name == "" {
		f.err = "give the clone a name"
		return nil
	}
	m.form = nil
	return m.runDay2(d)
}

func (m *Model) formBox() []string {
	s, f := m.c.Styles, m.form
	name := m.clean(f.e.Name)
	title, toggle, hint := "Snapshot of "+name, "With memory (RAM and device state)", "a running VM resumes where it was"
	if f.kind == formClone {
		title, toggle, hint = "Clone "+name, "Linked (shares a read-only base)", "fast, no copy; otherwise every disk is copied"
	}
	field := string(f.name)
	if f.focus == 0 {
		field += "_"
	}
	mark := "[ ]"
	if f.toggle {
		mark = "[x]"
	}
	rows := []string{"Name: " + m.clean(field), mark + " " + toggle}
	for i := range rows {
		if i == f.focus {
			rows[i] = s.Selected.Render("> " + rows[i])
		} else {
			rows[i] = "  " + rows[i]
		}
	}
	lines := []string{s.Section.Render(title), ""}
	lines = append(lines, rows...)
	lines = append(lines, "    "+s.Muted.Render(hint), "")
	if f.err != "" {
		// the core's reason is long: wrapped to the box
		badge := s.Badgef(styles.Failure) + " "
		w := max(min(m.c.Width-8, 56)-lipgloss.Width(badge), 20)
		for i, l := range strings.Split(ansi.Wordwrap(m.clean(f.err), w, ""), "\n") {
			if i == 0 {
				l = badge + l
			} else {
				l = strings.Repeat(" ", lipgloss.Width(badge)) + l
			}
			lines = append(lines, l)
		}
		lines = append(lines, "")
	}
	return m.box(append(lines, s.Muted.Render("enter ok  tab next field  space toggle  esc cancel")))
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
