package vms

import (
	"context"
	"errors"
	"fmt"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/vm"
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
	// actSnapshots opens the VM's snapshots panel; actClone its clone
	// form. The panel's and the form's own operations follow.
	actSnapshots
	actClone
	actSnapCreate
	actSnapRestore
	actSnapDelete
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
	{actSnapshots, "Snapshots..."},
	{actClone, "Clone..."},
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
	case actSnapCreate:
		return "snapshotting"
	case actSnapRestore:
		return "restoring"
	case actSnapDelete:
		return "deleting snapshot"
	case actClone:
		return "cloning"
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
		return "virt vm stop --timeout 0 " + n
	case actReboot:
		return "virt vm reboot " + n
	case actDelete:
		return "virt vm delete " + n
	case actConsole:
		return "virt vm console " + n
	case actSnapshots:
		return "virt vm snapshot list " + n
	case actClone:
		return "virt vm clone " + n + " NEW"
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
	case actSnapCreate, actSnapRestore, actClone:
		// a memory snapshot writes all of RAM; a full clone copies disks
		return day2Timeout
	}
	return actionTimeout
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
	if a == actSnapshots {
		// looking is allowed read-only: the panel's own keys ask to write
		return m.openSnapshots(e)
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
	case actClone:
		if _, ok := m.mgr.(Cloner); !ok {
			m.warn("cloning is not available here")
			return nil
		}
		m.form = &formState{kind: formClone, e: e}
		return nil
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
			if errors.Is(err, vm.ErrStillRunning) {
				// the way on first: the core's words follow, and the
				// status line is one screen wide
				err = fmt.Errorf("%s still runs, not powered off (f: force stop ends it): %w", name, err)
			}
		case actForceStop:
			err = mgr.Stop(ctx, ref, vm.StopOptions{Now: true})
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

// verb names an action in a confirmation.
func (a action) verb() string {
	switch a {
	case actForceStop:
		return "force stop"
	case actReboot:
		return "reset"
	case actSnapRestore:
		return "restore"
	}
	return "delete"
}

func autostartDone(on bool) string {
	if on {
		return "will start when the host boots (autostart on)"
	}
	return "will stay stopped when the host boots (autostart off)"
}

// day2Timeout bounds a snapshot, a restore or a clone: a memory snapshot
// writes all of the guest's RAM, a full clone copies every disk.
const day2Timeout = 10 * time.Minute

// Snapshotter is what the snapshots panel needs of the VM core
// (vm.Manager's snapshot methods; `virt vm snapshot` does the same).
type Snapshotter interface {
	ListSnapshots(ctx context.Context, ref string) ([]vm.Snapshot, error)
	CreateSnapshot(ctx context.Context, ref, name string, o vm.SnapshotOptions) (*vm.Snapshot, error)
	RestoreSnapshot(ctx context.Context, ref, name string, o vm.RestoreOptions) error
	DeleteSnapshot(ctx context.Context, ref, name string) error
}

// Cloner is what the clone form needs (vm.Manager.Clone, `virt vm
// clone`). A Manager without it has no clone form.
type Cloner interface {
	Clone(ctx context.Context, src, name string, o vm.CloneOptions) (*vm.VirtualMachine, error)
}

// day2 is one snapshot or clone operation the panel or a form asked for.
type day2 struct {
	act  action
	e    vm.Entry
	name string // the snapshot's, or the clone's
	// flag is the form's toggle: a snapshot with memory, a linked clone
	flag bool
}

// cli is the `virt` command that does the same.
func (d day2) cli() string {
	n, s := common.ShellQuote(d.e.Name), common.ShellQuote(d.name)
	switch d.act {
	case actSnapCreate:
		c := "virt vm snapshot create " + n + " " + s
		if d.flag {
			c += " --memory"
		}
		return c
	case actSnapRestore:
		c := "virt vm snapshot restore " + n + " " + s
		if running(d.e) {
			c += " --force"
		}
		return c
	case actSnapDelete:
		return "virt vm snapshot delete " + n + " " + s
	case actClone:
		c := "virt vm clone " + n + " " + s
		if d.flag {
			c += " --linked"
		}
		return c
	}
	return "virt vm list"
}

// done is the message after it succeeded.
func (d day2) done() string {
	s := fmt.Sprintf("%q", d.name)
	switch d.act {
	case actSnapCreate:
		if d.flag {
			return "snapshot " + s + " taken (with memory)"
		}
		return "snapshot " + s + " taken"
	case actSnapRestore:
		return "restored to snapshot " + s
	case actSnapDelete:
		return "snapshot " + s + " deleted"
	case actClone:
		return "cloned to " + s
	}
	return "done"
}

// runDay2 runs d in the background, the VM busy meanwhile, as run does.
func (m *Model) runDay2(d day2) tea.Cmd {
	if !m.c.Session.CanWrite() {
		m.warn(m.c.Session.ReadOnlyReason())
		return nil
	}
	k := entryKey(d.e)
	if b, ok := m.busy[k]; ok {
		m.warn(fmt.Sprintf("%s is busy (%s): wait for it to finish", d.e.Name, b.progress()))
		return nil
	}
	snap, _ := m.mgr.(Snapshotter)
	clone, _ := m.mgr.(Cloner)
	if (d.act == actClone && clone == nil) || (d.act != actClone && snap == nil) {
		m.warn("not available here")
		return nil
	}
	m.busy[k] = d.act
	m.msg = ""
	ref, parent := d.e.UID, m.c.Ctx
	if ref == "" {
		ref = d.e.Name
	}
	// a running VM is restored only with the operator's yes to the
	// warning that said so; one that started meanwhile is refused by the
	// core (vm.ErrRestoreRunning) rather than reset unasked
	force := running(d.e)
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(parent, d.act.timeout())
		defer cancel()
		var err error
		switch d.act {
		case actSnapCreate:
			_, err = snap.CreateSnapshot(ctx, ref, d.name, vm.SnapshotOptions{Memory: d.flag})
		case actSnapRestore:
			err = snap.RestoreSnapshot(ctx, ref, d.name, vm.RestoreOptions{Force: force})
		case actSnapDelete:
			err = snap.DeleteSnapshot(ctx, ref, d.name)
		case actClone:
			_, err = clone.Clone(ctx, ref, d.name, vm.CloneOptions{Linked: d.flag})
		}
		return actionDoneMsg{key: k, act: d.act, name: d.e.Name, err: err, done: d.done()}
	}
}

var _ Snapshotter = (*vm.Manager)(nil)

var _ Cloner = (*vm.Manager)(nil)
