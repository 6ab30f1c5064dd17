package power

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
	"github.com/virtcon/virtcon/vm"
)

const width, height = 76, 17

// fake records the power actions and the guests' shutdowns, in order;
// nothing in these tests can reach the real power.Reboot.
type fake struct {
	vms      []vm.Entry
	vmErr    error
	actErr   error
	planErr  error
	reboots  int
	poweroff int
	// shutdown is what the fake shutdown-guests returns (nil report with
	// shutErr: nothing stopped); calls lists shutdown/reboot/poweroff.
	shutdown *host.ShutdownReport
	shutErr  error
	calls    []string
	mu       sync.Mutex
}

func (f *fake) call(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fake) sources() Sources {
	return Sources{
		VMs: func(context.Context) ([]vm.Entry, error) { return f.vms, f.vmErr },
		Plan: func() (string, error) {
			return host.DefaultPolicy().ShutdownPlan(), f.planErr
		},
		ShutdownGuests: func(ctx context.Context, progress func(host.ShutdownProgress)) (*host.ShutdownReport, error) {
			f.call("shutdown-guests")
			if f.shutdown == nil && f.shutErr == nil {
				return &host.ShutdownReport{}, nil
			}
			var outs []host.ShutdownOutcome
			if f.shutdown != nil {
				outs = f.shutdown.Outcomes
			}
			for i, o := range outs {
				progress(host.ShutdownProgress{VM: host.ShutdownOutcome{Name: o.Name}, Done: i, Total: len(outs)})
				progress(host.ShutdownProgress{VM: o, Done: i + 1, Total: len(outs)})
			}
			return f.shutdown, f.shutErr
		},
		Reboot:   func(context.Context) error { f.call("reboot"); f.reboots++; return f.actErr },
		PowerOff: func(context.Context) error { f.call("poweroff"); f.poweroff++; return f.actErr },
	}
}

func threeRunning() []vm.Entry {
	return []vm.Entry{
		{Name: "web-01", Class: vm.ClassManaged, Phase: vm.PhaseRunning, PID: 101},
		{Name: "web-02", Class: vm.ClassManaged, Phase: vm.PhaseRunning, PID: 102},
		{Name: "build", Class: vm.ClassManaged, Phase: vm.PhaseStopped},
		{Name: "db-01", Class: vm.ClassManaged, Phase: vm.PhasePaused, PID: 103},
	}
}

// threeDown is what shutting down threeRunning did.
func threeDown() *host.ShutdownReport {
	d := func(s float64) duration.Duration { return duration.Duration(time.Duration(s * float64(time.Second))) }
	return &host.ShutdownReport{Took: d(31.2), Outcomes: []host.ShutdownOutcome{
		{Name: "web-01", Outcome: host.ShutdownPoweredOff, Took: d(2.1)},
		{Name: "web-02", Outcome: host.ShutdownPoweredOff, Took: d(3.4)},
		{Name: "db-01", Outcome: host.ShutdownQuit, Took: d(30.0)},
	}}
}

func newModel(t *testing.T, tier term.Tier, f *fake, writer bool) *Model {
	c := common.New(context.Background(), tier, testutil.Logger(t))
	c.Now = func() time.Time { return time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC) }
	c.Session = &common.Session{User: "alice", TTY: "tty1", Writer: writer, Holder: "bob on tty2 since 09:12"}
	m := New(c, f.sources())
	m.SetSize(width, height)
	return m
}

// send delivers msg and runs the Cmds that follow from it synchronously,
// one after the other (the shutdown's steps each bring the next).
func send(m *Model, msg tea.Msg) {
	_, cmd := m.Update(msg)
	for i := 0; cmd != nil; i++ {
		if i == 100 {
			panic("a chain of more than 100 commands")
		}
		_, cmd = m.Update(cmd())
	}
}

func press(m *Model, keys ...string) {
	for _, k := range tuitest.Keys(keys...) {
		send(m, k)
	}
}

func view(m *Model) string { return m.View().Content }

func states(t *testing.T, tier term.Tier) map[string]string {
	t.Helper()
	out := map[string]string{}
	f := &fake{vms: threeRunning()}
	m := newModel(t, tier, f, true)
	send(m, common.ActivateMsg{})
	out["idle"] = view(m)
	press(m, "b")
	out["reboot_dialog"] = view(m)
	press(m, "esc", "o")
	out["poweroff_dialog"] = view(m)

	none := newModel(t, tier, &fake{}, true)
	send(none, common.ActivateMsg{})
	out["no_vms"] = view(none)

	ro := newModel(t, tier, &fake{vms: threeRunning()}, false)
	send(ro, common.ActivateMsg{})
	press(ro, "b")
	out["read_only"] = view(ro)

	failed := newModel(t, tier, &fake{actErr: errors.New("reboot: /usr/bin/systemctl reboot: exit status 1: Failed to reboot system via logind: Access denied")}, true)
	send(failed, common.ActivateMsg{})
	press(failed, "b", "y")
	out["failed"] = view(failed)

	// the guests' shutdown in progress, then done and the host going down
	shutting := newModel(t, tier, &fake{vms: threeRunning()}, true)
	send(shutting, common.ActivateMsg{})
	shutting.acting, shutting.shutting = true, true
	down := threeDown()
	shutting.Update(shutdownStepMsg{p: host.ShutdownProgress{VM: down.Outcomes[1], Done: 2, Total: 3,
		Deadline: shutting.c.Now().Add(4*time.Minute + 30*time.Second)}})
	out["shutting_down"] = view(shutting)

	going := newModel(t, tier, &fake{vms: threeRunning(), shutdown: threeDown()}, true)
	send(going, common.ActivateMsg{})
	press(going, "o", "y")
	out["going_down"] = view(going)

	badPolicy := newModel(t, tier, &fake{vms: threeRunning(), planErr: errors.New("/etc/virtcon/host.yaml: invalid host policy: onShutdown: \"hibernate\": must be shutdown, save or kill")}, true)
	send(badPolicy, common.ActivateMsg{})
	press(badPolicy, "b")
	out["bad_policy_dialog"] = view(badPolicy)
	return out
}

func TestGolden(t *testing.T) {
	for _, tier := range tuitest.GoldenTiers {
		for name, out := range states(t, tier) {
			t.Run(tier.String()+"_"+name, func(t *testing.T) {
				tuitest.RequireGolden(t, tier, out, width, height)
			})
		}
	}
}

func TestPlainIsASCII(t *testing.T) {
	for name, out := range states(t, term.Plain) {
		t.Run(name, func(t *testing.T) { tuitest.RequireASCII(t, out) })
	}
	m := newModel(t, term.Plain, &fake{}, true)
	for _, col := range m.FullHelp() {
		for _, b := range col {
			tuitest.RequireASCII(t, b.Help().Key+b.Help().Desc)
		}
	}
}

func TestLinuxFits(t *testing.T) {
	for name, out := range states(t, term.Linux) {
		t.Run(name, func(t *testing.T) { tuitest.CheckSize(t, out, width, height) })
	}
}

// TestConfirmation: only a typed y goes ahead; any other key (enter, the
// default, included) cancels, as in every confirmation dialog.
func TestConfirmation(t *testing.T) {
	tests := []struct {
		name               string
		keys               []string
		reboots, poweroffs int
		open               bool
	}{
		{"b then y reboots", []string{"b", "y"}, 1, 0, false},
		{"o then y powers off", []string{"o", "y"}, 0, 1, false},
		{"enter on the selection opens, y confirms", []string{"down", "enter", "y"}, 0, 1, false},
		{"enter cancels (default No)", []string{"b", "enter"}, 0, 0, false},
		{"n cancels", []string{"b", "n"}, 0, 0, false},
		{"esc cancels", []string{"o", "esc"}, 0, 0, false},
		{"other letters cancel", []string{"b", "x"}, 0, 0, false},
		{"a digit cancels", []string{"o", "1"}, 0, 0, false},
		{"capital Y confirms", []string{"b", "Y"}, 1, 0, false},
		{"the dialog stays open until a key", []string{"b"}, 0, 0, true},
		{"a cancelled dialog needs a new one", []string{"b", "n", "y"}, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{vms: threeRunning()}
			m := newModel(t, term.Plain, f, true)
			send(m, common.ActivateMsg{})
			press(m, tc.keys...)
			if f.reboots != tc.reboots || f.poweroff != tc.poweroffs {
				t.Errorf("reboots %d, power-offs %d; want %d, %d", f.reboots, f.poweroff, tc.reboots, tc.poweroffs)
			}
			if m.Capturing() != tc.open {
				t.Errorf("dialog open (Capturing) = %v; want %v", m.Capturing(), tc.open)
			}
		})
	}
}

func TestDialogWarnsAboutRunningVMs(t *testing.T) {
	var vms []vm.Entry
	for i := range 7 {
		vms = append(vms, vm.Entry{Name: fmt.Sprintf("vm-%d", i), Class: vm.ClassManaged, Phase: vm.PhaseRunning, PID: 100 + i})
	}
	m := newModel(t, term.Plain, &fake{vms: vms}, true)
	send(m, common.ActivateMsg{})
	press(m, "b")
	if !m.Capturing() {
		t.Fatal("b did not open the dialog")
	}
	if got := m.CLI(); got != "virt host reboot --yes" {
		t.Errorf("CLI = %q; want virt host reboot --yes", got)
	}
	v := strings.Join(strings.Fields(strings.NewReplacer("|", " ", "│", " ").Replace(ansi.Strip(view(m)))), " ")
	for _, want := range []string{"Reboot the host?", "7 VMs are running (vm-0, vm-1, vm-2, vm-3, vm-4, and 2 more)",
		"they will be shut down first (the ACPI power button, 4 at once; those still up after 5m0s are quit)",
		"Press y to reboot now; any other key cancels."} {
		if !strings.Contains(v, want) {
			t.Errorf("dialog lacks %q:\n%s", want, view(m))
		}
	}
	for _, gone := range []string{"stopped hard", "virtcon does not stop them for you"} {
		if strings.Contains(v, gone) {
			t.Errorf("the dialog still says %q:\n%s", gone, view(m))
		}
	}
	if strings.Contains(v, "vm-5") {
		t.Error("the dialog names more than 5 VMs")
	}
}

func TestReadOnlyRefused(t *testing.T) {
	f := &fake{vms: threeRunning()}
	m := newModel(t, term.Plain, f, false)
	send(m, common.ActivateMsg{})
	for _, k := range []string{"b", "o", "enter"} {
		press(m, k)
		if m.Capturing() {
			t.Fatalf("%s opened the dialog on a read-only console", k)
		}
		press(m, "y")
	}
	if f.reboots+f.poweroff != 0 {
		t.Errorf("a read-only console ran %d power actions", f.reboots+f.poweroff)
	}
	want := "refused: read-only: bob on tty2 since 09:12 holds the console lock"
	if v := strings.Join(strings.Fields(ansi.Strip(view(m))), " "); !strings.Contains(v, want) {
		t.Errorf("screen lacks %q:\n%s", want, v)
	}
}

// TestLockLostWhileDialogOpen: the session is checked again at y.
func TestLockLostWhileDialogOpen(t *testing.T) {
	f := &fake{}
	m := newModel(t, term.Plain, f, true)
	press(m, "o")
	m.c.Session.Writer = false
	press(m, "y")
	if f.poweroff != 0 {
		t.Error("powered off after the console lost the lock")
	}
	if v := ansi.Strip(view(m)); !strings.Contains(v, "power off refused") {
		t.Errorf("no refusal:\n%s", v)
	}
}

func TestActionResult(t *testing.T) {
	f := &fake{}
	m := newModel(t, term.Plain, f, true)
	press(m, "b", "y")
	if v := ansi.Strip(view(m)); !strings.Contains(v, "reboot requested: the host is going down") {
		t.Errorf("no success text:\n%s", v)
	}
	press(m, "o")
	if m.Capturing() || f.poweroff != 0 {
		t.Error("a second action was offered while the host is going down")
	}

	e := &fake{actErr: errors.New("poweroff: /usr/sbin/poweroff: exit status 1: must be superuser.")}
	n := newModel(t, term.Plain, e, true)
	press(n, "o", "y")
	v := strings.Join(strings.Fields(ansi.Strip(view(n))), " ")
	if !strings.Contains(v, "[FAIL] "+e.actErr.Error()) {
		t.Errorf("error not shown verbatim:\n%s", view(n))
	}
	// after a failure the operator may try again
	press(n, "o", "y")
	if e.poweroff != 2 {
		t.Errorf("power-offs %d; want 2 (a retry after a failure)", e.poweroff)
	}
}

func TestVMListStates(t *testing.T) {
	m := newModel(t, term.Plain, &fake{vmErr: errors.New("vm store: permission denied")}, true)
	if v := ansi.Strip(view(m)); !strings.Contains(v, "checking for running VMs...") {
		t.Errorf("before the load:\n%s", v)
	}
	send(m, common.ActivateMsg{})
	v := strings.Join(strings.Fields(ansi.Strip(view(m))), " ")
	if !strings.Contains(v, "[????] could not list the VMs (vm store: permission denied); the host does not go down before they can be shut down") {
		t.Errorf("list error not shown:\n%s", view(m))
	}
	// the list is reloaded every few ticks and on opening the dialog
	reloads := 0
	src := (&fake{}).sources()
	src.VMs = func(context.Context) ([]vm.Entry, error) { reloads++; return nil, nil }
	r := New(m.c, src)
	for range reloadEvery {
		send(r, common.TickMsg{})
	}
	send(r, tuitest.Key("b"))
	if reloads != 2 {
		t.Errorf("VM list loaded %d times; want 2 (a tick period, the dialog)", reloads)
	}
	if _, cmd := r.Update(common.RefreshMsg{}); cmd == nil {
		t.Error("refresh did not reload the VM list")
	}
	if _, cmd := r.Update(common.RefreshMsg{}); cmd != nil {
		t.Error("a second load started while one is in flight")
	}
}

func TestSelectionAndCLI(t *testing.T) {
	m := newModel(t, term.Plain, &fake{}, true)
	if m.CLI() != "virt host reboot --yes" {
		t.Errorf("CLI = %q; want the reboot command", m.CLI())
	}
	press(m, "down")
	if m.CLI() != "virt host poweroff --yes" {
		t.Errorf("CLI after down = %q; want the poweroff command", m.CLI())
	}
	if !strings.Contains(ansi.Strip(view(m)), "> o  Power off") {
		t.Errorf("the selection is not marked:\n%s", view(m))
	}
	press(m, "k")
	if m.CLI() != "virt host reboot --yes" {
		t.Errorf("CLI after k = %q; want the reboot command", m.CLI())
	}
}

// The guests go down first, as the policy says, with progress; then the
// host. A shutdown that stopped nothing keeps the host up.
func TestShutdownBeforePower(t *testing.T) {
	f := &fake{vms: threeRunning(), shutdown: threeDown()}
	m := newModel(t, term.Plain, f, true)
	send(m, common.ActivateMsg{})
	press(m, "b", "y")
	if got := strings.Join(f.calls, ","); got != "shutdown-guests,reboot" {
		t.Errorf("calls %s; want shutdown-guests, then reboot", got)
	}
	v := strings.Join(strings.Fields(ansi.Strip(view(m))), " ")
	for _, want := range []string{"VMs down in 31.2s: 2 powered off, 1 quit", "reboot requested: the host is going down"} {
		if !strings.Contains(v, want) {
			t.Errorf("screen lacks %q:\n%s", want, view(m))
		}
	}
	if m.ended == nil || m.ended.Name != "db-01" || m.step == nil || m.step.Done != 3 {
		t.Errorf("the last step seen: %+v, ended %+v; want the third VM done", m.step, m.ended)
	}

	e := &fake{vms: threeRunning(), shutErr: errors.New("shutdown guests: list the VMs: vm store /var/lib/virtcon/vms: permission denied")}
	n := newModel(t, term.Plain, e, true)
	send(n, common.ActivateMsg{})
	press(n, "o", "y")
	if e.poweroff != 0 {
		t.Error("powered off although the VMs could not be shut down first")
	}
	v = strings.Join(strings.Fields(ansi.Strip(view(n))), " ")
	if !strings.Contains(v, "[FAIL] power off not done: the VMs could not be shut down first: shutdown guests: list the VMs") {
		t.Errorf("no failure shown:\n%s", view(n))
	}
	// and the operator may try again
	e.shutErr, e.shutdown = nil, threeDown()
	press(n, "o", "y")
	if e.poweroff != 1 {
		t.Errorf("power-offs %d after a retry; want 1", e.poweroff)
	}
}
