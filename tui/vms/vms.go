package vms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/vm"
)

// Manager is what the screen needs from the VM core; *vm.Manager
// satisfies it.
type Manager interface {
	List(ctx context.Context) ([]vm.Entry, error)
	Start(ctx context.Context, ref string) error
	Stop(ctx context.Context, ref string, opts vm.StopOptions) error
	Reboot(ctx context.Context, ref string) error
	Delete(ctx context.Context, ref string, force bool) error
	// SetAutostart sets whether the host's boot starts the VM, and where
	// in its order (vm.Manager.SetAutostart).
	SetAutostart(ctx context.Context, ref string, on bool, order int, delay time.Duration) error
	// Console attaches in and out to the VM's serial console until
	// Ctrl-], EOF on in or ctx ends; it never stops the VM.
	Console(ctx context.Context, ref string, in io.Reader, out io.Writer, attached func(*vm.VirtualMachine)) error
}

var _ Manager = (*vm.Manager)(nil)

// Options configure the screen.
type Options struct {
	// IdleTimeout detaches a VM console nobody types into, and locks the
	// DCUI (the console's own idle lock); 0 never does.
	IdleTimeout time.Duration
	// Activity is called (from the console's goroutine) when the operator
	// types in a VM console: the DCUI's idle timer's Touch.
	Activity func()
}

// Timeouts of the calls. Stop gets the guest's ACPI time plus room for
// QMP quit and SIGKILL, as `virt vm stop` has.
const (
	listTimeout   = 30 * time.Second
	startTimeout  = 60 * time.Second
	stopGrace     = vm.DefaultStopTimeout // what `virt vm stop` gives the guest
	stopMargin    = 30 * time.Second
	actionTimeout = 30 * time.Second
	reloadEvery   = 5 // ticks
)

// action is a lifecycle operation on one VM.
type action int

const (
	actStart action = iota + 1
	actStop
	actForceStop
	actReboot
	actDelete
	actConsole
	// actAutostart turns the VM's autostart on when it is off and off
	// when it is on, keeping its startup order and delay.
	actAutostart
)

// menuItems is the action menu, in order. The key that picks each is its
// binding in the screen's KeyMap: the list and the menu share one keymap,
// so a letter does the same thing in both and both legends show it.
var menuItems = []struct {
	act   action
	label string
}{
	{actStart, "Start"},
	{actStop, "Stop (ACPI power button, 60s)"},
	{actForceStop, "Force stop (quit QEMU at once)"},
	{actReboot, "Reboot (hard reset)"},
	{actAutostart, "Turn autostart on/off"}, // menuLabel words it by the VM
	{actDelete, "Delete..."},
	{actConsole, "Console (Ctrl-] detaches)"},
}

// progress is what the phase column says while the action runs.
func (a action) progress() string {
	switch a {
	case actStart:
		return "starting"
	case actStop:
		return "stopping"
	case actForceStop:
		return "killing"
	case actReboot:
		return "rebooting"
	case actDelete:
		return "deleting"
	case actAutostart:
		return "saving"
	}
	return "busy"
}

// done is the message after the action succeeded.
func (a action) done() string {
	switch a {
	case actStart:
		return "started"
	case actStop:
		return "stopped"
	case actForceStop:
		return "stopped (forced)"
	case actReboot:
		return "reset"
	case actDelete:
		return "deleted"
	}
	return "done"
}

// cli is the `virt` command that does the same.
func (a action) cli(name string) string {
	n := common.ShellQuote(name)
	switch a {
	case actStart:
		return "virt vm start " + n
	case actStop:
		return "virt vm stop " + n
	case actForceStop:
		return "virt vm stop --force " + n
	case actReboot:
		return "virt vm reboot " + n
	case actDelete:
		return "virt vm delete " + n
	case actConsole:
		return "virt vm console " + n
	}
	return "virt vm list"
}

// cliFor is a.cli for the VM e: the autostart toggle's command says which
// way it goes.
func cliFor(a action, e vm.Entry) string {
	if a != actAutostart {
		return a.cli(e.Name)
	}
	if e.Autostart {
		return "virt vm autostart " + common.ShellQuote(e.Name) + " off"
	}
	return "virt vm autostart " + common.ShellQuote(e.Name) + " on"
}

func (a action) timeout() time.Duration {
	switch a {
	case actStart:
		return startTimeout
	case actStop:
		return stopGrace + stopMargin
	}
	return actionTimeout
}

// Messages of the screen's own commands.
type (
	listMsg struct {
		entries []vm.Entry
		err     error
	}
	actionDoneMsg struct {
		key  string
		act  action
		name string
		err  error
		// done, when set, is the message instead of act.done()'s
		done string
	}
	consoleDoneMsg struct {
		name string
		err  error
	}
)

// KeyMap is the screen's own bindings; none uses a globally reserved letter.
// The action keys (Start ... Console) act on the selected VM in the list and
// pick the item in the action menu alike.
type KeyMap struct {
	Up, Down, PageUp, PageDown, Home, End key.Binding
	Menu, Start, Stop, ForceStop, Reboot  key.Binding
	Delete, Console, Autostart            key.Binding
	// the action menu's own keys, and the console's way out
	Choose, Close, Detach key.Binding
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

		Choose: keys.On("enter").Help("enter", "choose"),
		Close:  keys.On("esc").Help("esc", "close"),
		Detach: keys.On("ctrl+]").Help("^]", "leave the console (the VM keeps running)"),
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
		{k.Menu, k.Start, k.Stop, k.ForceStop, k.Reboot, k.Autostart, k.Delete, k.Console, k.Detach},
		{k.Choose, k.menuLetters(), k.Close},
	}
}

type menuState struct {
	key string // the VM it was opened for
	idx int
}

type confirmState struct {
	act action
	e   vm.Entry
}

// Model is the virtual machines screen.
type Model struct {
	c    common.Common
	mgr  Manager
	opts Options
	keys KeyMap

	entries      []vm.Entry
	loaded       bool
	loadErr      error
	loading      bool
	reloadQueued bool
	ticks        int

	cursor, offset int
	busy           map[string]action
	msg            string

	menu    *menuState
	confirm *confirmState
}

var _ common.Screen = (*Model)(nil)

// New returns the screen. mgr is usually a *vm.Manager.
func New(c common.Common, mgr Manager, opts Options) *Model {
	if c.Session == nil {
		c.Session = &common.Session{}
	}
	if c.Styles == nil {
		c.Styles = styles.New(c.Tier)
	}
	m := &Model{c: c, mgr: mgr, opts: opts, keys: DefaultKeyMap(), busy: map[string]action{}}
	m.SetSize(c.Width, c.Height)
	return m
}

// SetSize lays the content area out for w x h cells.
func (m *Model) SetSize(w, h int) {
	if w <= 0 || h <= 0 {
		w, h = term.Size(w, h)
	}
	m.c.Width, m.c.Height = w, h
	m.scrollToCursor()
}

// Title names the screen.
func (m *Model) Title() string { return "Virtual machines" }

// Capturing reports that the menu or the confirmation dialog takes every key.
func (m *Model) Capturing() bool { return m.menu != nil || m.confirm != nil }

// ShortHelp is the screen's part of the key legend: the list's keys, or
// those of the open menu or dialog. It fits one 76-column line.
func (m *Model) ShortHelp() []key.Binding {
	k := m.keys
	switch {
	case m.confirm != nil:
		return common.ConfirmHelp("delete")
	case m.menu != nil:
		return []key.Binding{k.Up, k.Down, k.Choose, k.menuLetters(), k.Close}
	}
	return k.ShortHelp()
}

// FullHelp is the screen's help.
func (m *Model) FullHelp() [][]key.Binding { return m.keys.FullHelp() }

// CLI is the command of the highlighted menu item or pending action, else
// the obvious next step for the selected VM, else `virt vm list`.
func (m *Model) CLI() string {
	if m.confirm != nil {
		return m.confirm.act.cli(m.confirm.e.Name)
	}
	e, ok := m.selected()
	if !ok || !actionable(e) {
		return "virt vm list"
	}
	if m.menu != nil {
		return cliFor(menuItems[m.menu.idx].act, e)
	}
	if a, ok := m.busy[entryKey(e)]; ok {
		return cliFor(a, e)
	}
	if running(e) {
		return actStop.cli(e.Name)
	}
	return actStart.cli(e.Name)
}

// Init loads nothing: the app sends ActivateMsg when the screen shows.
func (m *Model) Init() tea.Cmd { return nil }

// entryKey identifies an entry across reloads.
func entryKey(e vm.Entry) string {
	if e.UID != "" {
		return e.UID
	}
	return "pid:" + strconv.Itoa(e.PID) + ":" + e.Name
}

// actionable and running are the core's rules (vm.Entry).
func actionable(e vm.Entry) bool { return e.Actionable() }
func running(e vm.Entry) bool    { return e.Running() }

func (m *Model) selected() (vm.Entry, bool) {
	if m.cursor < 0 || m.cursor >= len(m.entries) {
		return vm.Entry{}, false
	}
	return m.entries[m.cursor], true
}

func (m *Model) find(k string) (vm.Entry, bool) {
	for _, e := range m.entries {
		if entryKey(e) == k {
			return e, true
		}
	}
	return vm.Entry{}, false
}

// listRows is how many table rows fit: the area less the header, the
// detail line and the message line.
func (m *Model) listRows() int { return max(m.c.Height-3, 1) }

func (m *Model) scrollToCursor() {
	m.cursor = min(max(m.cursor, 0), max(len(m.entries)-1, 0))
	rows := m.listRows()
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
	if m.cursor >= m.offset+rows {
		m.offset = m.cursor - rows + 1
	}
	m.offset = min(max(m.offset, 0), max(len(m.entries)-rows, 0))
}

func (m *Model) load() tea.Cmd {
	if m.mgr == nil {
		return nil
	}
	if m.loading {
		m.reloadQueued = true
		return nil
	}
	m.loading = true
	mgr, parent := m.mgr, m.c.Ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, listTimeout)
		defer cancel()
		entries, err := mgr.List(ctx)
		return listMsg{entries, err}
	}
}

// Update handles keys and results. It never waits on the host.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case common.ActivateMsg, common.RefreshMsg:
		return m, m.load()
	case common.TickMsg:
		m.ticks++
		if m.ticks%reloadEvery == 0 {
			return m, m.load()
		}
	case listMsg:
		m.loading, m.loaded = false, true
		m.loadErr = msg.err
		if msg.err != nil && m.c.Logger != nil {
			m.c.Logger.Warn("vms: list", "err", msg.err)
		}
		if msg.entries != nil || msg.err == nil {
			m.setEntries(msg.entries)
		}
		if m.reloadQueued {
			m.reloadQueued = false
			return m, m.load()
		}
	case actionDoneMsg:
		delete(m.busy, msg.key)
		if msg.err != nil {
			m.fail(msg.err.Error())
			if m.c.Logger != nil {
				m.c.Logger.Warn("vms: action failed", "vm", msg.name, "action", msg.act.progress(), "err", msg.err)
			}
		} else if msg.done != "" {
			m.ok(msg.name + " " + msg.done)
		} else {
			m.ok(msg.name + " " + msg.act.done())
		}
		return m, m.load()
	case consoleDoneMsg:
		switch {
		case errors.Is(msg.err, errConsoleIdle):
			m.info("console of " + msg.name + " detached: no input for " + m.opts.IdleTimeout.String())
			lock := func() tea.Msg {
				return common.LockMsg{Why: "after " + m.opts.IdleTimeout.String() + " without input in a VM console"}
			}
			return m, tea.Batch(lock, m.load())
		case msg.err != nil:
			m.fail("console " + msg.name + ": " + msg.err.Error())
		default:
			m.info("console closed (" + msg.name + " keeps running)")
		}
		// typing in the console was activity the DCUI did not see
		return m, tea.Batch(func() tea.Msg { return common.ActivityMsg{} }, m.load())
	case tea.KeyPressMsg:
		return m, m.key(msg)
	}
	return m, nil
}

func (m *Model) setEntries(entries []vm.Entry) {
	var keep string
	if e, ok := m.selected(); ok {
		keep = entryKey(e)
	}
	m.entries = entries
	for i, e := range entries {
		if entryKey(e) == keep {
			m.cursor = i
			break
		}
	}
	m.scrollToCursor()
	if m.menu != nil {
		if _, ok := m.find(m.menu.key); !ok {
			m.menu = nil
		}
	}
}

func (m *Model) key(msg tea.KeyPressMsg) tea.Cmd {
	switch {
	case m.confirm != nil:
		return m.confirmKey(msg)
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
	case msg.String() == "esc":
		m.msg = ""
	}
	m.scrollToCursor()
	return nil
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

// notOurs says why virtcon does not act on e, "" when it does.
func notOurs(e vm.Entry) string {
	if actionable(e) {
		return ""
	}
	why := e.Message
	if why == "" {
		why = "listed read-only"
	}
	return fmt.Sprintf("%s is %s: %s", label(e), e.Class, why)
}

// label names an entry for a message: its name, else (an UNREADABLE VM
// whose spec holds the name) its UID.
func label(e vm.Entry) string {
	if e.Name == "" && e.UID != "" {
		return e.UID
	}
	return e.Name
}

func (m *Model) request(a action) tea.Cmd {
	e, ok := m.selected()
	if !ok {
		m.warn("no VM selected")
		return nil
	}
	return m.requestFor(a, e)
}

// requestFor applies the refusals, then runs the action, asks to confirm
// it, or opens the console.
func (m *Model) requestFor(a action, e vm.Entry) tea.Cmd {
	if why := notOurs(e); why != "" {
		m.warn(why)
		return nil
	}
	if !m.c.Session.CanWrite() {
		m.warn(m.c.Session.ReadOnlyReason())
		return nil
	}
	if b, ok := m.busy[entryKey(e)]; ok {
		m.warn(fmt.Sprintf("%s is busy (%s): wait for it to finish", e.Name, b.progress()))
		return nil
	}
	switch a {
	case actConsole:
		return m.console(e)
	case actDelete:
		if running(e) {
			// the core refuses it too; `virt vm delete --force` is the CLI's way
			m.warn(fmt.Sprintf("%s is running: stop it first (or: virt vm delete --force %s)", e.Name, common.ShellQuote(e.Name)))
			return nil
		}
		m.confirm = &confirmState{act: a, e: e}
		return nil
	case actForceStop, actReboot:
		// like pulling the power cable or pressing reset: the guest loses
		// what it has not written, so a stray key must not do it
		m.confirm = &confirmState{act: a, e: e}
		return nil
	}
	return m.run(a, e)
}

func (m *Model) run(a action, e vm.Entry) tea.Cmd {
	k := entryKey(e)
	m.busy[k] = a
	m.msg = ""
	mgr, ref, name, parent := m.mgr, e.UID, e.Name, m.c.Ctx
	if ref == "" {
		ref = name
	}
	on, order, delay := !e.Autostart, e.StartupOrder, e.StartupDelay
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, a.timeout())
		defer cancel()
		var err error
		switch a {
		case actAutostart:
			err = mgr.SetAutostart(ctx, ref, on, order, delay)
			return actionDoneMsg{key: k, act: a, name: name, err: err, done: autostartDone(on)}
		case actStart:
			err = mgr.Start(ctx, ref)
		case actStop:
			err = mgr.Stop(ctx, ref, vm.StopOptions{Timeout: stopGrace})
		case actForceStop:
			err = mgr.Stop(ctx, ref, vm.StopOptions{Force: true})
		case actReboot:
			err = mgr.Reboot(ctx, ref)
		case actDelete:
			err = mgr.Delete(ctx, ref, false)
		}
		return actionDoneMsg{key: k, act: a, name: name, err: err}
	}
}

// console gives the terminal to the VM's serial console (what `virt vm
// console NAME` does) until the operator detaches with Ctrl-].
func (m *Model) console(e vm.Entry) tea.Cmd {
	if !running(e) {
		m.warn(e.Name + " is not running: start it first")
		return nil
	}
	m.msg = ""
	return tea.Exec(m.consoleExec(e), func(err error) tea.Msg {
		return consoleDoneMsg{name: e.Name, err: err}
	})
}

func (m *Model) consoleExec(e vm.Entry) *consoleExec {
	// the UUID is the VM's identity: a name is only a label
	ref := e.UID
	if ref == "" {
		ref = e.Name
	}
	return &consoleExec{ctx: m.c.Ctx, mgr: m.mgr, ref: ref, name: m.clean(e.Name), idle: m.opts.IdleTimeout, activity: m.opts.Activity}
}

func (m *Model) ok(s string)   { m.msg = m.c.Styles.Badgef(styles.OK) + " " + m.clean(s) }
func (m *Model) info(s string) { m.msg = m.c.Styles.Badgef(styles.Info) + " " + m.clean(s) }
func (m *Model) warn(s string) { m.msg = m.c.Styles.Badgef(styles.Warning) + " " + m.clean(s) }
func (m *Model) fail(s string) { m.msg = m.c.Styles.Badgef(styles.Failure) + " " + m.clean(s) }

// clean makes host text safe to draw (an EXTERNAL guest's name comes
// from any process's argv): common.Clean, ASCII only in the plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }

// View draws the content area.
func (m *Model) View() tea.View { return tea.NewView(m.Render()) }

// Render is the content area: exactly Height lines of Width cells.
func (m *Model) Render() string {
	s := m.c.Styles
	w, h := m.c.Width, m.c.Height
	lines := m.tableLines()
	rows := m.listRows()
	for len(lines) < rows+1 {
		lines = append(lines, "")
	}
	lines = append(lines[:rows+1], m.footLines()...)
	out := strings.Split(common.Fit(lines, w, h, s.Ellipsis), "\n")
	switch {
	case m.confirm != nil:
		out = overlay(out, m.confirmBox(), w)
	case m.menu != nil:
		out = overlay(out, m.menuBox(), w)
	}
	return strings.Join(out, "\n")
}

// columns are the widths of `virt vm list`'s columns but UID, which gets
// what is left.
type columns struct{ name, class, phase, accel, pid, cpus, mem int }

func (m *Model) columns() columns {
	c := columns{name: 4, class: 8, phase: 12, accel: 5, pid: 7, cpus: 4, mem: 9}
	for _, e := range m.entries {
		c.name = max(c.name, ansi.StringWidth(m.clean(e.Name)))
		c.class = max(c.class, len(e.Class)) // UNREADABLE, whole
	}
	c.name = min(c.name, 20)
	return c
}

// cell pads or truncates s to exactly n cells.
func (m *Model) cell(s string, n int) string {
	if ansi.StringWidth(s) > n {
		s = ansi.Truncate(s, n, m.c.Styles.Ellipsis)
	}
	return s + strings.Repeat(" ", max(n-ansi.StringWidth(s), 0))
}

func (m *Model) tableLines() []string {
	s := m.c.Styles
	cols := m.columns()
	uidW := m.c.Width - 2 - cols.name - cols.class - cols.phase - cols.accel - cols.pid - cols.cpus - cols.mem - 7
	row := func(name, class, phase, accel, pid, cpus, mem, uid string) string {
		name, accel, uid = m.clean(name), m.clean(accel), m.clean(uid)
		parts := []string{m.cell(name, cols.name), m.cell(class, cols.class), m.cell(phase, cols.phase),
			m.cell(accel, cols.accel), m.cell(pid, cols.pid), m.cell(cpus, cols.cpus), m.cell(mem, cols.mem)}
		if uidW >= 8 {
			parts = append(parts, m.cell(uid, uidW))
		}
		return strings.Join(parts, " ")
	}
	lines := []string{"  " + s.Section.Render(row("NAME", "CLASS", "PHASE", "ACCEL", "PID", "CPUS", "MEMORY", "UID"))}
	switch {
	case !m.loaded:
		return append(lines, "  "+s.Muted.Render("loading"+dots(s)))
	case len(m.entries) == 0 && m.loadErr != nil:
		return append(lines, "  "+s.Badgef(styles.Failure)+" "+m.clean(m.loadErr.Error()))
	case len(m.entries) == 0:
		return append(lines, "  No VMs on this host yet. Create one from a shell:",
			"    "+s.Muted.Render("virt vm create NAME --image IMAGE"),
			"    "+s.Muted.Render("virt apply -f vm.yaml"))
	}
	end := min(m.offset+m.listRows(), len(m.entries))
	for i := m.offset; i < end; i++ {
		e := m.entries[i]
		pid, mem, cpus := "-", "-", "-"
		if e.CPUs > 0 {
			cpus = strconv.Itoa(e.CPUs)
		}
		if e.PID > 0 {
			pid = strconv.Itoa(e.PID)
		}
		if e.MemoryMiB > 0 {
			mem = strconv.Itoa(e.MemoryMiB) + "MiB"
		}
		accel := e.Accel
		if accel == "" {
			accel = "-"
		}
		phase := e.Phase
		busy, isBusy := m.busy[entryKey(e)]
		if isBusy {
			phase = busy.progress() + dots(s)
		}
		name := e.Name
		if i == m.cursor {
			lines = append(lines, s.Selected.Render("> "+row(name, e.Class, phase, accel, pid, cpus, mem, e.UID)))
			continue
		}
		// style the cells after padding so the columns stay aligned
		r := row(name, e.Class, phase, accel, pid, cpus, mem, e.UID)
		lines = append(lines, "  "+m.styleRow(r, cols, e, isBusy))
	}
	return lines
}

// styleRow colours the class and phase cells of an unselected row. The
// words themselves carry the meaning; colour only repeats it.
func (m *Model) styleRow(r string, cols columns, e vm.Entry, busy bool) string {
	s := m.c.Styles
	classAt := cols.name + 1
	phaseAt := classAt + cols.class + 1
	phaseEnd := phaseAt + cols.phase
	var cls, ph lipgloss.Style
	cls, ph = s.Value, s.Value
	switch e.Class {
	case vm.ClassMissing:
		cls = s.Badge[styles.Warning]
	case vm.ClassExternal, vm.ClassOrphaned:
		cls = s.Muted
	case vm.ClassUnreadable:
		// ours, but nothing can act on it until its spec is repaired
		cls = s.Badge[styles.Failure]
	}
	switch {
	case e.Class == vm.ClassUnreadable:
		ph = s.Badge[styles.Failure]
	case busy:
		ph = s.Hint
	case e.Phase == vm.PhaseRunning:
		ph = s.Badge[styles.OK]
	case e.Phase == vm.PhaseError || e.Phase == vm.PhaseUnresponsive:
		ph = s.Badge[styles.Failure]
	case e.Phase == vm.PhasePaused || e.Phase == vm.PhaseShuttingDown:
		ph = s.Badge[styles.Warning]
	}
	return ansi.Cut(r, 0, classAt) + cls.Render(ansi.Cut(r, classAt, classAt+cols.class)) +
		ansi.Cut(r, classAt+cols.class, phaseAt) + ph.Render(ansi.Cut(r, phaseAt, phaseEnd)) +
		ansi.Cut(r, phaseEnd, ansi.StringWidth(r))
}

// detailLine is the position in the list and what the core says about the
// selected entry.
func (m *Model) detailLine() string {
	s := m.c.Styles
	e, ok := m.selected()
	if !ok {
		return ""
	}
	pos := fmt.Sprintf("%d/%d", m.cursor+1, len(m.entries))
	var notes []string
	if e.Message != "" {
		notes = append(notes, e.Message)
	}
	if e.AccelReason != "" {
		notes = append(notes, "accel: "+e.AccelReason)
	}
	if e.Autostart {
		notes = append(notes, autostartNote(e))
	}
	if len(notes) == 0 && actionable(e) {
		notes = append(notes, "enter: actions")
	}
	return s.Muted.Render(pos + "  " + m.clean(e.Name) + ": " + m.clean(strings.Join(notes, "; ")))
}

// footLines are the detail line and the message line under the table.
// For an UNREADABLE row what is wrong with its spec is what the operator
// needs: it is marked as a failure, the spec's error first, and, unless
// the screen has a message of its own, the spec file on the message line
// (where the list's error would say the same at greater length). No
// "enter: actions": nothing acts on it until the spec is repaired.
func (m *Model) footLines() []string {
	e, ok := m.selected()
	if !ok || e.Class != vm.ClassUnreadable {
		return []string{m.detailLine(), m.messageLine()}
	}
	s := m.c.Styles
	badge := s.Badgef(styles.Failure) + " "
	indent := strings.Repeat(" ", lipgloss.Width(badge))
	pos := fmt.Sprintf("%d/%d  ", m.cursor+1, len(m.entries))
	se := specErrorFor(m.loadErr, e.UID)
	if se == nil {
		// the core's message alone: wrapped over both lines
		text := pos + m.clean(label(e)) + ": " + m.clean(e.Message)
		if m.msg != "" {
			return []string{badge + text, m.msg}
		}
		first, _, _ := strings.Cut(ansi.Wrap(text, max(m.c.Width-len(indent), 20), "/"), "\n")
		rest, ok := strings.CutPrefix(text, first)
		if !ok {
			first, rest = text, ""
		}
		if rest = strings.TrimLeft(rest, " "); rest != "" {
			rest = indent + rest // Fit cuts it to the width
		}
		return []string{badge + first, rest}
	}
	name := ""
	if e.Name != "" {
		name = m.clean(e.Name) + ": "
	}
	detail := badge + pos + name + "spec unreadable: " + m.clean(se.Err.Error())
	if m.msg != "" {
		return []string{detail, m.msg}
	}
	return []string{detail, indent + m.clean(se.Path)}
}

// specErrorFor finds the error of uid's spec in the list's error (a
// join of one *vm.SpecError per spec that cannot be read).
func specErrorFor(err error, uid string) *vm.SpecError {
	if err == nil || uid == "" {
		return nil
	}
	var se *vm.SpecError
	if errors.As(err, &se) && se.UID == uid && se.Err != nil {
		return se
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if se := specErrorFor(e, uid); se != nil {
				return se
			}
		}
	}
	return nil
}

func (m *Model) messageLine() string {
	if m.msg != "" {
		return m.msg
	}
	if m.loadErr != nil && len(m.entries) > 0 {
		return m.c.Styles.Badgef(styles.Warning) + " " + m.clean(m.loadErr.Error())
	}
	return ""
}

func dots(s *styles.Styles) string {
	if s.Ellipsis == "~" {
		return "..."
	}
	return s.Ellipsis
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

// verb names an action in a confirmation.
func (a action) verb() string {
	switch a {
	case actForceStop:
		return "force stop"
	case actReboot:
		return "reset"
	}
	return "delete"
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

func autostartDone(on bool) string {
	if on {
		return "will start when the host boots (autostart on)"
	}
	return "will stay stopped when the host boots (autostart off)"
}

// autostartNote is the detail line's word on a VM that autostarts.
func autostartNote(e vm.Entry) string {
	n := "autostart"
	if e.StartupOrder != 0 {
		n += fmt.Sprintf(" (order %d", e.StartupOrder)
		if e.StartupDelay != 0 {
			n += ", delay " + e.StartupDelay.String()
		}
		n += ")"
	} else if e.StartupDelay != 0 {
		n += " (delay " + e.StartupDelay.String() + ")"
	}
	return n
}
