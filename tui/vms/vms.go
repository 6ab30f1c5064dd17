package vms

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/tui/common"
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
	stats   statsView  // live CPU and memory (stats.go)
	snaps   *snapState // the snapshots panel (detail.go)
	form    *formState // the snapshot or clone form (dialogs.go)
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
func (m *Model) Capturing() bool {
	return m.menu != nil || m.confirm != nil || m.snaps != nil || m.form != nil
}

// ShortHelp is the screen's part of the key legend: the list's keys, or
// those of the open menu or dialog. It fits one 76-column line.
func (m *Model) ShortHelp() []key.Binding {
	k := m.keys
	switch {
	case m.confirm != nil:
		return common.ConfirmHelp(m.confirm.act.verb())
	case m.form != nil:
		return []key.Binding{k.Submit, k.NextField, k.Toggle, k.Close}
	case m.snaps != nil:
		return []key.Binding{k.Up, k.Down, k.SnapCreate, k.SnapRestore, k.SnapDelete, k.Close}
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
		if m.confirm.d != nil {
			return m.confirm.d.cli()
		}
		return m.confirm.act.cli(m.confirm.e.Name)
	}
	if m.form != nil {
		return m.form.day2().cli()
	}
	if m.snaps != nil {
		return actSnapshots.cli(m.snaps.e.Name)
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
		return m, m.sampleStats(false)
	case statsMsg:
		m.statsLoaded(msg)
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
		return m, m.sampleStats(true)
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
		return m, tea.Batch(m.load(), m.snapDone(msg.key))
	case snapListMsg:
		m.snapsLoaded(msg)
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

func (m *Model) ok(s string)   { m.msg = m.c.Styles.Badgef(styles.OK) + " " + m.clean(s) }
func (m *Model) info(s string) { m.msg = m.c.Styles.Badgef(styles.Info) + " " + m.clean(s) }
func (m *Model) warn(s string) { m.msg = m.c.Styles.Badgef(styles.Warning) + " " + m.clean(s) }
func (m *Model) fail(s string) { m.msg = m.c.Styles.Badgef(styles.Failure) + " " + m.clean(s) }

// clean makes host text safe to draw (an EXTERNAL guest's name comes
// from any process's argv): common.Clean, ASCII only in the plain tier.
func (m *Model) clean(s string) string { return common.Clean(s, m.c.Tier == term.Plain) }
