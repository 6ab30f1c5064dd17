package vms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
	"github.com/virtcon/virtcon/vm"
)

// The content area the app gives a screen at 80x24.
const areaW, areaH = 76, 17

func uid(n int) string { return fmt.Sprintf("%08x-8b7d-4e1a-9c3b-2d5e6f7a8b9c", 0x3f2a9c00+n) }

func fakeEntries() []vm.Entry {
	return []vm.Entry{
		{Name: "web-01", UID: uid(1), Class: vm.ClassManaged, Phase: vm.PhaseRunning, Accel: "kvm", PID: 4242, CPUs: 2, MemoryMiB: 2048},
		{Name: "web-02", UID: uid(2), Class: vm.ClassManaged, Phase: vm.PhaseStopped, Accel: "kvm", CPUs: 2, MemoryMiB: 2048},
		{Name: "db-01", UID: uid(3), Class: vm.ClassManaged, Phase: vm.PhasePaused, Accel: "kvm", PID: 5150, CPUs: 8, MemoryMiB: 16384},
		{Name: "ghost", UID: uid(4), Class: vm.ClassMissing, Phase: vm.PhaseStopped, CPUs: 1, MemoryMiB: 512,
			Message: "spec says running but the QEMU process is gone (virt vm start to restart, virt vm stop to accept)"},
		{Name: "legacy-win", UID: uid(5), Class: vm.ClassExternal, Phase: vm.PhaseRunning, Accel: "kvm", PID: 777, Source: "libvirt",
			Message: "not managed by virtcon: listed read-only"},
		{Name: "-", UID: uid(6), Class: vm.ClassOrphaned, Phase: vm.PhaseStopped,
			Message: "disk without a VM: /var/lib/virtcon/vms/" + uid(6)},
	}
}

// unreadableSpec is the core's error for a VM whose spec cannot be read.
var unreadableSpec = &vm.SpecError{UID: uid(7), Path: "/var/lib/virtcon/vms/" + uid(7) + "/vm.yaml",
	Err: errors.New("spec cut short: no trailer line")}

// withUnreadable is fakeEntries with an UNREADABLE VM last, and the error
// vm.Manager.List returns with them.
func withUnreadable() *fakeManager {
	e := vm.Entry{UID: uid(7), Class: vm.ClassUnreadable, Phase: vm.PhaseUnknown,
		Message: "spec unreadable: " + unreadableSpec.Error() + " (repair or restore it; nothing acts on this VM until then)"}
	return &fakeManager{entries: append(fakeEntries(), e), listErr: unreadableSpec}
}

// call is one call the fake manager received.
type call struct {
	op, ref string
	opts    vm.StopOptions
	force   bool
}

type fakeManager struct {
	mu      sync.Mutex
	entries []vm.Entry
	listErr error
	err     error         // returned by every action
	stopErr error         // returned by Stop alone
	delay   time.Duration // every call sleeps this long
	calls   []call
}

func (f *fakeManager) record(ctx context.Context, c call) error {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	d := f.delay
	f.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f.err
}

func (f *fakeManager) List(ctx context.Context) ([]vm.Entry, error) {
	if err := f.record(ctx, call{op: "list"}); err != nil {
		return nil, err
	}
	return append([]vm.Entry(nil), f.entries...), f.listErr
}
func (f *fakeManager) Start(ctx context.Context, ref string) error {
	return f.record(ctx, call{op: "start", ref: ref})
}
func (f *fakeManager) Stop(ctx context.Context, ref string, o vm.StopOptions) error {
	if err := f.record(ctx, call{op: "stop", ref: ref, opts: o}); err != nil {
		return err
	}
	return f.stopErr
}
func (f *fakeManager) Reboot(ctx context.Context, ref string) error {
	return f.record(ctx, call{op: "reboot", ref: ref})
}
func (f *fakeManager) Delete(ctx context.Context, ref string, force bool) error {
	return f.record(ctx, call{op: "delete", ref: ref, force: force})
}
func (f *fakeManager) SetAutostart(ctx context.Context, ref string, on bool, order int, delay time.Duration) error {
	return f.record(ctx, call{op: fmt.Sprintf("autostart %v %d %v", on, order, delay), ref: ref})
}

// Console echoes in to out until Ctrl-] or ctx ends, like the core.
func (f *fakeManager) Console(ctx context.Context, ref string, in io.Reader, out io.Writer, attached func(*vm.VirtualMachine)) error {
	if err := f.record(ctx, call{op: "console", ref: ref}); err != nil {
		return err
	}
	if attached != nil {
		attached(&vm.VirtualMachine{})
	}
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := in.Read(buf)
			for _, b := range buf[:n] {
				if b == 0x1d {
					done <- nil
					return
				}
				out.Write([]byte{b})
			}
			if err != nil {
				done <- nil
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return nil
	}
}

func (f *fakeManager) actions() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.op != "list" {
			out = append(out, c)
		}
	}
	return out
}

func writer() *common.Session { return &common.Session{User: "root", TTY: "tty1", Writer: true} }

func newModel(t *testing.T, tier term.Tier, f *fakeManager, sess *common.Session) *Model {
	t.Helper()
	c := common.New(context.Background(), tier, testutil.Logger(t))
	c.Session = sess
	m := New(c, f, Options{IdleTimeout: 5 * time.Minute})
	m.SetSize(areaW, areaH)
	return m
}

// loaded returns a screen that has shown the fake's list.
func loaded(t *testing.T, tier term.Tier, f *fakeManager, sess *common.Session) *Model {
	t.Helper()
	m := newModel(t, tier, f, sess)
	deliver(t, m, common.ActivateMsg{})
	if !m.loaded {
		t.Fatal("the list did not load")
	}
	return m
}

// deliver sends msg and runs the commands it returns, synchronously, as the
// program would, feeding their messages back. Console commands are not run.
func deliver(t *testing.T, m *Model, msg tea.Msg) {
	t.Helper()
	queue := []tea.Msg{msg}
	for len(queue) > 0 {
		msg, queue = queue[0], queue[1:]
		_, cmd := m.Update(msg)
		if cmd != nil {
			queue = append(queue, cmd())
		}
	}
}

func keysTo(t *testing.T, m *Model, ks ...string) {
	t.Helper()
	for _, k := range tuitest.Keys(ks...) {
		deliver(t, m, k)
	}
}

func screen(m *Model) string { return ansi.Strip(m.View().Content) }

func TestGolden(t *testing.T) {
	many := func() *fakeManager {
		f := &fakeManager{}
		for i := range 50 {
			phase, pid := vm.PhaseStopped, 0
			if i%3 == 0 {
				phase, pid = vm.PhaseRunning, 10000+i
			}
			f.entries = append(f.entries, vm.Entry{Name: fmt.Sprintf("guest-%02d", i+1), UID: uid(100 + i), Class: vm.ClassManaged,
				Phase: phase, PID: pid, Accel: "kvm", CPUs: 1 + i%4, MemoryMiB: 512 << (i % 4)})
		}
		return f
	}
	tests := []struct {
		name string
		f    func() *fakeManager
		keys []string
		want []string
	}{
		{"list", func() *fakeManager { return &fakeManager{entries: fakeEntries()} }, []string{"j"},
			[]string{"> web-02", "MISSING", "EXTERNAL", "4242", "2048MiB", "2/6"}},
		{"menu", func() *fakeManager { return &fakeManager{entries: fakeEntries()} }, []string{"enter"},
			[]string{"Stop (ACPI", "Ctrl-] detaches", "esc close"}},
		{"confirm", func() *fakeManager { return &fakeManager{entries: fakeEntries()} }, []string{"j", "D"},
			[]string{"Delete VM web-02?", "any other key cancels", "cannot be undone"}},
		{"empty", func() *fakeManager { return &fakeManager{} }, nil, []string{"No VMs on this host yet."}},
		{"unreadable", withUnreadable, nil, []string{"UNREADABLE Unknown", "1/7  web-01"}},
		// the core's message, which spec and what is wrong, over the
		// detail and message lines
		{"unreadable-selected", withUnreadable, []string{"end"},
			[]string{"> ", "[FAIL] 7/7  spec unreadable: spec cut short: no trailer line", "       /var/lib/virtcon/vms/" + uid(7) + "/vm.yaml"}},
		{"scrolled50", many, []string{"pgdown", "pgdown", "j", "j"}, []string{"> guest-31", "31/50"}},
	}
	for _, tier := range tuitest.GoldenTiers {
		for _, tt := range tests {
			t.Run(tier.String()+"/"+tt.name, func(t *testing.T) {
				m := loaded(t, tier, tt.f(), writer())
				keysTo(t, m, tt.keys...)
				out := m.View().Content
				tuitest.RequireGolden(t, tier, out, areaW, areaH)
				for _, w := range tt.want {
					if !strings.Contains(ansi.Strip(out), w) {
						t.Errorf("screen lacks %q:\n%s", w, ansi.Strip(out))
					}
				}
			})
		}
	}
}

func TestNavigation(t *testing.T) {
	f := &fakeManager{}
	for i := range 50 {
		f.entries = append(f.entries, vm.Entry{Name: fmt.Sprintf("g%02d", i), UID: uid(i), Class: vm.ClassManaged, Phase: vm.PhaseStopped})
	}
	rows := areaH - 3
	tests := []struct {
		keys               []string
		cursor, wantOffset int
	}{
		{nil, 0, 0},
		{[]string{"j", "j", "down"}, 3, 0},
		{[]string{"j", "k", "up", "up"}, 0, 0},
		{[]string{"pgdown"}, rows, 1},
		{[]string{"pgdown", "pgup"}, 0, 0},
		{[]string{"end"}, 49, 50 - rows},
		{[]string{"end", "j"}, 49, 50 - rows},
		{[]string{"end", "home"}, 0, 0},
		{[]string{"end", "pgup"}, 49 - rows, 49 - rows},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.keys, ","), func(t *testing.T) {
			m := loaded(t, term.Plain, f, writer())
			keysTo(t, m, tt.keys...)
			if m.cursor != tt.cursor || m.offset != tt.wantOffset {
				t.Errorf("cursor, offset = %d, %d; want %d, %d", m.cursor, m.offset, tt.cursor, tt.wantOffset)
			}
			if !strings.Contains(screen(m), fmt.Sprintf("> g%02d", tt.cursor)) {
				t.Errorf("selected row g%02d not on screen:\n%s", tt.cursor, screen(m))
			}
		})
	}
}

func TestActions(t *testing.T) {
	tests := []struct {
		name    string
		keys    []string
		want    call
		cli     string // CLI() just before the last key
		message string
	}{
		{"start key", []string{"j", "a"}, call{op: "start", ref: uid(2)}, "virt vm start web-02", "[PASS] web-02 started"},
		{"stop key", []string{"o"}, call{op: "stop", ref: uid(1), opts: vm.StopOptions{Timeout: 60 * time.Second}}, "virt vm stop web-01", "[PASS] web-01 stopped"},
		{"force stop key confirmed", []string{"f", "y"}, call{op: "stop", ref: uid(1), opts: vm.StopOptions{Now: true}}, "virt vm stop --timeout 0 web-01", "web-01 stopped (forced)"},
		{"reboot key confirmed", []string{"b", "y"}, call{op: "reboot", ref: uid(1)}, "virt vm reboot web-01", "web-01 reset"},
		{"menu default on running is stop", []string{"enter", "enter"}, call{op: "stop", ref: uid(1), opts: vm.StopOptions{Timeout: 60 * time.Second}}, "virt vm stop web-01", "web-01 stopped"},
		{"menu default on stopped is start", []string{"j", "enter", "enter"}, call{op: "start", ref: uid(2)}, "virt vm start web-02", "web-02 started"},
		{"menu letter force", []string{"enter", "f", "y"}, call{op: "stop", ref: uid(1), opts: vm.StopOptions{Now: true}}, "virt vm stop --timeout 0 web-01", "stopped (forced)"},
		{"menu arrows to force", []string{"enter", "down", "enter", "y"}, call{op: "stop", ref: uid(1), opts: vm.StopOptions{Now: true}}, "virt vm stop --timeout 0 web-01", "stopped (forced)"},
		{"menu reboot", []string{"enter", "b", "y"}, call{op: "reboot", ref: uid(1)}, "virt vm reboot web-01", "web-01 reset"},
		{"missing VM can start", []string{"j", "j", "j", "a"}, call{op: "start", ref: uid(4)}, "virt vm start ghost", "ghost started"},
		{"delete stopped confirmed with y", []string{"j", "D", "y"}, call{op: "delete", ref: uid(2)}, "virt vm delete web-02", "web-02 deleted"},
		{"delete key and capital Y", []string{"j", "delete", "Y"}, call{op: "delete", ref: uid(2)}, "virt vm delete web-02", "web-02 deleted"},
		{"delete from menu with D", []string{"j", "enter", "D", "y"}, call{op: "delete", ref: uid(2)}, "virt vm delete web-02", "web-02 deleted"},
		{"menu letter start", []string{"j", "enter", "a"}, call{op: "start", ref: uid(2)}, "virt vm start web-02", "web-02 started"},
		{"menu letter stop", []string{"enter", "o"}, call{op: "stop", ref: uid(1), opts: vm.StopOptions{Timeout: 60 * time.Second}}, "virt vm stop web-01", "web-01 stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeManager{entries: fakeEntries()}
			m := loaded(t, term.Plain, f, writer())
			keysTo(t, m, tt.keys[:len(tt.keys)-1]...)
			if got := m.CLI(); got != tt.cli {
				t.Errorf("CLI() before %q = %q; want %q", tt.keys[len(tt.keys)-1], got, tt.cli)
			}
			keysTo(t, m, tt.keys[len(tt.keys)-1])
			got := f.actions()
			if len(got) != 1 || got[0] != tt.want {
				t.Fatalf("calls = %+v; want [%+v]", got, tt.want)
			}
			if !strings.Contains(screen(m), tt.message) {
				t.Errorf("screen lacks %q:\n%s", tt.message, screen(m))
			}
			if m.Capturing() {
				t.Errorf("Capturing() = true after the action; want false")
			}
		})
	}
}

// TestDeleteCancelled: y confirms, any other key cancels, as in every
// confirmation dialog; the key that cancels does nothing else.
func TestDeleteCancelled(t *testing.T) {
	for _, k := range []string{"enter", "n", "esc", "tab", "q", "s", "j", "D"} {
		t.Run(k, func(t *testing.T) {
			f := &fakeManager{entries: fakeEntries()}
			m := loaded(t, term.Plain, f, writer())
			keysTo(t, m, "j", "D")
			if !m.Capturing() {
				t.Fatal("Capturing() = false with the dialog open")
			}
			if got := screen(m); !strings.Contains(got, "Delete VM web-02?") || !strings.Contains(got, "Press y to delete web-02; any other key cancels.") {
				t.Fatalf("no dialog naming the VM and the keys:\n%s", got)
			}
			keysTo(t, m, k)
			if got := f.actions(); len(got) != 0 {
				t.Errorf("calls = %+v; want none", got)
			}
			if m.Capturing() || !strings.Contains(screen(m), "delete cancelled") {
				t.Errorf("dialog still open or no cancel message:\n%s", screen(m))
			}
			if e, _ := m.selected(); e.Name != "web-02" {
				t.Errorf("the cancelling key also moved the cursor to %q", e.Name)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	ro := &common.Session{User: "bob", TTY: "ttyS0", Holder: "alice on tty1 since 09:12"}
	tests := []struct {
		name string
		sess *common.Session
		keys []string
		want string
	}{
		{"read-only start", ro, []string{"j", "a"}, "read-only: alice on tty1 since 09:12 holds the console lock"},
		{"read-only stop", ro, []string{"o"}, "read-only: alice"},
		{"read-only force", ro, []string{"f"}, "read-only: alice"},
		{"read-only reboot", ro, []string{"b"}, "read-only: alice"},
		{"read-only delete", ro, []string{"j", "D"}, "read-only: alice"},
		{"read-only console", ro, []string{"c"}, "read-only: alice"},
		{"read-only menu item", ro, []string{"enter", "a"}, "read-only: alice"},
		{"logged out", &common.Session{}, []string{"a"}, "log in first"},
		{"external", writer(), []string{"end", "k", "a"}, "legacy-win is EXTERNAL: not managed by virtcon"},
		{"external menu", writer(), []string{"end", "k", "enter"}, "legacy-win is EXTERNAL"},
		{"orphaned", writer(), []string{"end", "D"}, "- is ORPHANED: disk without a VM"},
		{"delete running", writer(), []string{"D"}, "web-01 is running: stop it first (or: virt vm delete --force web-01)"},
		{"console stopped", writer(), []string{"j", "c"}, "web-02 is not running"},
		// a VM whose spec cannot be read is ours but read-only: every
		// action would fail; it is named by its UID (its name is in the spec)
		{"unreadable start", writer(), []string{"end", "a"}, uid(7) + " is UNREADABLE: spec unreadable"},
		{"unreadable stop", writer(), []string{"end", "o"}, uid(7) + " is UNREADABLE"},
		{"unreadable force", writer(), []string{"end", "f"}, uid(7) + " is UNREADABLE"},
		{"unreadable reboot", writer(), []string{"end", "b"}, uid(7) + " is UNREADABLE"},
		{"unreadable delete", writer(), []string{"end", "D"}, uid(7) + " is UNREADABLE"},
		{"unreadable console", writer(), []string{"end", "c"}, uid(7) + " is UNREADABLE"},
		{"unreadable menu", writer(), []string{"end", "enter"}, uid(7) + " is UNREADABLE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := withUnreadable()
			f.entries = f.entries[:len(f.entries)-1]
			f.listErr = nil
			if strings.HasPrefix(tt.name, "unreadable") {
				f = withUnreadable()
			}
			m := loaded(t, term.Plain, f, tt.sess)
			var last tea.Cmd
			for _, k := range tt.keys {
				_, last = m.Update(tuitest.Key(k))
			}
			if last != nil {
				t.Errorf("the refused action returned a command")
			}
			if got := f.actions(); len(got) != 0 {
				t.Errorf("calls = %+v; want none", got)
			}
			if m.Capturing() {
				t.Errorf("a dialog is open after a refusal")
			}
			if !strings.Contains(screen(m), "[WARN] "+tt.want) {
				t.Errorf("screen lacks %q:\n%s", "[WARN] "+tt.want, screen(m))
			}
		})
	}
}

func TestActionErrorVerbatim(t *testing.T) {
	coreErr := errors.New(`vm "web-02": start: qemu exited: could not open disk: Permission denied`)
	f := &fakeManager{entries: fakeEntries(), err: coreErr}
	m := loaded(t, term.Plain, f, writer())
	keysTo(t, m, "j", "a")
	if !strings.Contains(screen(m), "[FAIL] "+coreErr.Error()[:60]) {
		t.Errorf("screen lacks the core's error:\n%s", screen(m))
	}
	if len(m.busy) != 0 {
		t.Errorf("busy = %v after the action ended; want empty", m.busy)
	}
}

// A stop that leaves the guest running (it did not power off within the
// grace) says so with the way on first, then the core's words.
func TestStopLeftRunning(t *testing.T) {
	coreErr := &vm.StopTimeoutError{Name: "web-01", Timeout: 60 * time.Second}
	f := &fakeManager{entries: fakeEntries(), stopErr: coreErr}
	m := loaded(t, term.Plain, f, writer())
	keysTo(t, m, "o")
	if want := "[FAIL] web-01 still runs, not powered off (f: force stop ends it)"; !strings.Contains(screen(m), want) {
		t.Errorf("screen lacks %q:\n%s", want, screen(m))
	}
}

func TestConsole(t *testing.T) {
	f := &fakeManager{entries: fakeEntries()}
	m := loaded(t, term.Plain, f, writer())
	_, cmd := m.Update(tuitest.Key("c"))
	if cmd == nil {
		t.Fatalf("console returned no command; screen:\n%s", screen(m))
	}
	if got := m.CLI(); got != "virt vm stop web-01" {
		t.Errorf("CLI() = %q", got)
	}
	// the program runs the command and then delivers the callback's message
	deliver(t, m, consoleDoneMsg{name: "web-01"})
	if !strings.Contains(screen(m), "[INFO] console closed (web-01 keeps running)") {
		t.Errorf("no 'console closed' message:\n%s", screen(m))
	}
	deliver(t, m, consoleDoneMsg{name: "web-01", err: errors.New("exit status 1")})
	if !strings.Contains(screen(m), "[FAIL] console web-01: exit status 1") {
		t.Errorf("no console failure message:\n%s", screen(m))
	}

	m.c.Session.Writer = false
	if _, cmd := m.Update(tuitest.Key("c")); cmd != nil {
		t.Errorf("read-only console returned a command")
	}
	if !strings.Contains(screen(m), "read-only") {
		t.Errorf("no read-only refusal:\n%s", screen(m))
	}
}
func TestCLI(t *testing.T) {
	tests := []struct {
		keys []string
		want string
	}{
		{nil, "virt vm stop web-01"},
		{[]string{"j"}, "virt vm start web-02"},
		{[]string{"enter"}, "virt vm stop web-01"},
		{[]string{"enter", "up"}, "virt vm start web-01"},
		{[]string{"enter", "down"}, "virt vm stop --timeout 0 web-01"},
		{[]string{"enter", "down", "down"}, "virt vm reboot web-01"},
		{[]string{"enter", "up", "up"}, "virt vm console web-01"},
		{[]string{"j", "D"}, "virt vm delete web-02"},
		{[]string{"end"}, "virt vm list"},
	}
	for _, tt := range tests {
		m := loaded(t, term.Plain, &fakeManager{entries: fakeEntries()}, writer())
		keysTo(t, m, tt.keys...)
		if got := m.CLI(); got != tt.want {
			t.Errorf("after %v: CLI() = %q; want %q", tt.keys, got, tt.want)
		}
	}
	empty := loaded(t, term.Plain, &fakeManager{}, writer())
	if got := empty.CLI(); got != "virt vm list" {
		t.Errorf("empty list: CLI() = %q; want virt vm list", got)
	}
	if got := common.ShellQuote("it's"); got != `'it'\''s'` {
		t.Errorf("shellQuote = %q", got)
	}
}

// TestKeypressDuringSlowCall: while a 2 s Start is in flight, every key is
// answered by Update within 50 ms, the row says "starting", a second
// action on the same VM is refused, and the result lands afterwards.
func TestKeypressDuringSlowCall(t *testing.T) {
	f := &fakeManager{entries: fakeEntries()}
	m := loaded(t, term.Plain, f, writer())
	f.mu.Lock()
	f.delay = 2 * time.Second
	f.mu.Unlock()

	keysTo(t, m, "j")
	_, cmd := m.Update(tuitest.Key("a"))
	if cmd == nil {
		t.Fatal("start returned no command")
	}
	result := make(chan tea.Msg, 1)
	go func() { result <- cmd() }() // as the program runs it

	_, reload := m.Update(common.RefreshMsg{}) // a slow List in flight too
	if reload != nil {
		go reload()
	}
	var slowest time.Duration
	for _, k := range []string{"j", "k", "pgdown", "home", "end", "home", "j", "a", "enter", "esc", "down"} {
		start := time.Now()
		m.Update(tuitest.Key(k))
		_ = m.View()
		d := time.Since(start)
		if d > 50*time.Millisecond {
			t.Errorf("key %q took %v while Start was in flight; want under 50ms", k, d)
		}
		slowest = max(slowest, d)
	}
	t.Logf("slowest key (Update + View) while a 2 s Start and List were in flight: %v (limit 50ms)", slowest)
	if !strings.Contains(screen(m), "web-02 is busy (starting)") {
		t.Errorf("second start on the same VM not refused:\n%s", screen(m))
	}
	keysTo(t, m, "home", "j")
	if !strings.Contains(screen(m), "starting...") {
		t.Errorf("row does not say starting:\n%s", screen(m))
	}
	if got := m.CLI(); got != "virt vm start web-02" {
		t.Errorf("CLI() during the start = %q", got)
	}
	select {
	case msg := <-result:
		m.Update(msg)
	case <-time.After(5 * time.Second):
		t.Fatal("the start command never finished")
	}
	if !strings.Contains(screen(m), "[PASS] web-02 started") {
		t.Errorf("no result after the slow call:\n%s", screen(m))
	}
}

func TestReload(t *testing.T) {
	f := &fakeManager{entries: fakeEntries()}
	m := loaded(t, term.Plain, f, writer())
	keysTo(t, m, "j", "j") // db-01
	for i := 1; i <= 4; i++ {
		if _, cmd := m.Update(common.TickMsg{}); cmd != nil {
			t.Fatalf("tick %d reloads; want every %d", i, reloadEvery)
		}
	}
	// the list changes under us: the selection follows the VM, not the row
	f.mu.Lock()
	f.entries = append([]vm.Entry{{Name: "new-01", UID: uid(9), Class: vm.ClassManaged, Phase: vm.PhaseStopped}}, f.entries...)
	f.mu.Unlock()
	_, cmd := m.Update(common.TickMsg{})
	if cmd == nil {
		t.Fatalf("tick %d did not reload", reloadEvery)
	}
	// a refresh while the load is in flight is queued, not lost
	if _, again := m.Update(common.RefreshMsg{}); again != nil {
		t.Errorf("a second load started while one was in flight")
	}
	deliver(t, m, cmd())
	if e, _ := m.selected(); e.Name != "db-01" {
		t.Errorf("selected %q after reload; want db-01", e.Name)
	}
	if n := len(f.calls); n != 3 {
		t.Errorf("List called %d times; want 3 (activate, tick, queued refresh)", n)
	}

	// a failing list keeps what it returned and says why
	f.listErr = errors.New(`spec "/var/lib/virtcon/vms/x/vm.yaml": unknown field "cpu"`)
	deliver(t, m, common.RefreshMsg{})
	if !strings.Contains(screen(m), `[WARN] spec "/var/lib/virtcon/vms/x/vm.yaml"`) || !strings.Contains(screen(m), "db-01") {
		t.Errorf("partial list error not shown with the list:\n%s", screen(m))
	}
}

func TestPlainIsASCII(t *testing.T) {
	f := &fakeManager{entries: append(fakeEntries(),
		vm.Entry{Name: "caf\u00e9-\u4e16\u754c", UID: uid(7), Class: vm.ClassManaged, Phase: vm.PhaseStopped},
		vm.Entry{Name: "evil\x1b[31m\u2028", UID: uid(8), Class: vm.ClassExternal, Phase: vm.PhaseRunning, PID: 9})}
	m := loaded(t, term.Plain, f, writer())
	screens := map[string]string{"list": m.View().Content}
	keysTo(t, m, "end", "k")
	screens["unicode name selected"] = m.View().Content
	keysTo(t, m, "D")
	screens["dialog"] = m.View().Content
	keysTo(t, m, "esc", "enter")
	screens["menu"] = m.View().Content
	keysTo(t, m, "esc", "end", "a")
	screens["refusal"] = m.View().Content
	for name, out := range screens {
		t.Run(name, func(t *testing.T) {
			tuitest.CheckSize(t, out, areaW, areaH)
			tuitest.RequireASCII(t, out)
			if strings.Contains(out, "\x1b[31m") {
				t.Errorf("%s: an escape sequence from a VM name reached the screen", name)
			}
		})
	}
	for _, b := range m.FullHelp() {
		for _, k := range b {
			tuitest.RequireASCII(t, k.Help().Key+k.Help().Desc)
		}
	}
}

// TestProgramPlainOutput runs the screen in a real program at the content
// size: the bytes written to the terminal are ASCII in the plain tier.
func TestProgramPlainOutput(t *testing.T) {
	m := newModel(t, term.Plain, &fakeManager{entries: fakeEntries()}, writer())
	tm := teatest.NewTestModel(t, untilLoaded{m}, teatest.WithInitialTermSize(areaW, areaH),
		teatest.WithProgramOptions(tea.WithColorProfile(colorprofile.Ascii)))
	raw, err := io.ReadAll(tm.FinalOutput(t, teatest.WithFinalTimeout(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	tuitest.RequireASCII(t, string(raw))
	if !strings.Contains(string(raw), "legacy-win") {
		t.Errorf("program output lacks the list")
	}
}

type untilLoaded struct{ *Model }

func (u untilLoaded) Init() tea.Cmd { return func() tea.Msg { return common.ActivateMsg{} } }

func (u untilLoaded) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	_, cmd := u.Model.Update(msg)
	if u.loaded {
		return u, tea.Quit
	}
	return u, cmd
}

// TestKeysAvoidReserved: no binding of the list or of the menu uses a
// letter the global key map takes: the menu captures keys while it is
// open, so a global letter there would shadow the global key.
func TestKeysAvoidReserved(t *testing.T) {
	m := newModel(t, term.Rich, &fakeManager{}, writer())
	if m.Capturing() {
		t.Fatal("the list captures keys")
	}
	for _, col := range append(m.FullHelp(), m.ShortHelp()) {
		for _, b := range col {
			for _, k := range b.Keys() {
				if len(k) == 1 && strings.Contains(keys.Reserved, k) {
					t.Errorf("binding %q uses reserved key %q", b.Help().Desc, k)
				}
			}
		}
	}
}
func TestHardActionsNeedConfirmation(t *testing.T) {
	for _, k := range []string{"f", "b"} {
		f := &fakeManager{entries: fakeEntries()}
		m := loaded(t, term.Plain, f, writer())
		keysTo(t, m, k)
		if !m.Capturing() {
			t.Fatalf("%s: no confirmation dialog", k)
		}
		mustScreen := screen(m)
		if !strings.Contains(mustScreen, "web-01?") || !strings.Contains(mustScreen, "any other key cancels") {
			t.Errorf("%s: dialog does not name the VM and the rule:\n%s", k, mustScreen)
		}
		keysTo(t, m, "enter")
		if got := f.actions(); len(got) != 0 {
			t.Errorf("%s then enter ran %+v; want nothing", k, got)
		}
		if !strings.Contains(screen(m), "cancelled") {
			t.Errorf("%s: no cancelled message:\n%s", k, screen(m))
		}
	}
}

// TestListAndMenuShareKeys: an action's key does the same on the list and
// in the action menu (one keymap), and both legends show the same letters.
func TestListAndMenuShareKeys(t *testing.T) {
	type outcome struct {
		calls     string
		capturing bool
		cli, msg  string
		cmd       bool
	}
	run := func(ks ...string) outcome {
		f := &fakeManager{entries: fakeEntries()}
		m := loaded(t, term.Plain, f, writer())
		keysTo(t, m, ks[:len(ks)-1]...)
		_, cmd := m.Update(tuitest.Key(ks[len(ks)-1]))
		if cmd != nil && ks[len(ks)-1] != "c" {
			// run the action (the console's Exec is not run here)
			deliver(t, m, cmd())
		}
		return outcome{calls: fmt.Sprint(f.actions()), capturing: m.Capturing(), cli: m.CLI(),
			msg: ansi.Strip(m.messageLine()), cmd: cmd != nil}
	}
	for _, tt := range []struct {
		key  string
		down []string // to the VM it acts on
	}{
		{"a", []string{"j"}}, {"o", nil}, {"f", nil}, {"b", nil}, {"t", nil}, {"D", []string{"j"}}, {"delete", []string{"j"}}, {"c", nil},
	} {
		t.Run(tt.key, func(t *testing.T) {
			list := run(append(append([]string{}, tt.down...), tt.key)...)
			menu := run(append(append(append([]string{}, tt.down...), "enter"), tt.key)...)
			if list != menu {
				t.Errorf("%q on the list: %+v; in the menu: %+v; want the same", tt.key, list, menu)
			}
			if list.calls == "[]" && !list.capturing && !list.cmd {
				t.Errorf("%q does nothing on the list: %+v", tt.key, list)
			}
		})
	}

	// the legends: the list's action keys are the letters the menu shows
	m := loaded(t, term.Plain, &fakeManager{entries: fakeEntries()}, writer())
	var listKeys []string
	for _, b := range m.ShortHelp()[1:] {
		listKeys = append(listKeys, b.Help().Key)
	}
	keysTo(t, m, "enter")
	box := screen(m)
	for _, k := range listKeys {
		if !strings.Contains(box, "> "+k+" ") && !strings.Contains(box, "  "+k+" ") {
			t.Errorf("the menu does not show the list's key %q:\n%s", k, box)
		}
	}
	var pick string
	for _, b := range m.ShortHelp() {
		if b.Help().Desc == "pick" {
			pick = b.Help().Key
		}
	}
	if pick != "a/o/f/b/t/D/z/u/c" {
		t.Errorf("menu legend pick keys = %q; want a/o/f/b/t/D/z/u/c, the list's letters", pick)
	}
	// x is the global log-out letter: no key in the menu
	keysTo(t, m, "x")
	if m.confirm != nil || m.menu == nil {
		t.Errorf("x in the menu: confirm %v, menu %v; want no action (x is log out)", m.confirm, m.menu)
	}
}

// Without the core's error for the row (the list came back without it),
// the row's message itself runs over the detail and message lines; an
// action's message keeps its own line.
func TestUnreadableDetailFromMessage(t *testing.T) {
	f := withUnreadable()
	f.listErr = nil
	m := loaded(t, term.Plain, f, writer())
	keysTo(t, m, "end")
	lines := strings.Split(screen(m), "\n")
	detail, msg := lines[len(lines)-2], lines[len(lines)-1]
	if !strings.HasPrefix(detail, "[FAIL] 7/7  "+uid(7)+": spec unreadable: vm") || !strings.HasPrefix(msg, "       ") || !strings.Contains(msg, "/var/lib/virtcon/vms/") {
		t.Errorf("detail %q, message %q; want the row's message over both, marked [FAIL]", detail, msg)
	}
	keysTo(t, m, "a")
	lines = strings.Split(screen(m), "\n")
	detail, msg = lines[len(lines)-2], lines[len(lines)-1]
	if !strings.HasPrefix(detail, "[FAIL] 7/7") || !strings.HasPrefix(msg, "[WARN] "+uid(7)+" is UNREADABLE") {
		t.Errorf("after a refused start: detail %q, message %q; want the refusal on the message line", detail, msg)
	}
}

// t (on the list or in the menu) turns autostart on when it is off and
// off when it is on, through the core, keeping the startup order and
// delay; the menu and the CLI line say which way it goes.
func TestAutostartToggle(t *testing.T) {
	entries := func() []vm.Entry {
		es := fakeEntries()
		es[1].Autostart, es[1].StartupOrder, es[1].StartupDelay = true, 2, 10*time.Second // web-02
		return es
	}
	for _, tt := range []struct {
		name       string
		keys       []string
		cli, label string
		want       call
		message    string
	}{
		{"off to on from the list", []string{"t"}, "virt vm autostart web-01 on", "",
			call{op: "autostart true 0 0s", ref: uid(1)}, "web-01 will start when the host boots (autostart on)"},
		{"on to off from the menu, order and delay kept", []string{"j", "enter", "t"}, "virt vm autostart web-02 off", "t     Turn autostart off",
			call{op: "autostart false 2 10s", ref: uid(2)}, "web-02 will stay stopped when the host boots (autostart off)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeManager{entries: entries()}
			m := loaded(t, term.Plain, f, writer())
			keysTo(t, m, tt.keys[:len(tt.keys)-1]...)
			if tt.label != "" {
				if !strings.Contains(screen(m), tt.label) {
					t.Errorf("menu lacks %q:\n%s", tt.label, screen(m))
				}
				// highlight the item: the CLI line is its command
				for m.menu.idx != 4 {
					keysTo(t, m, "down")
				}
				if got := m.CLI(); got != tt.cli {
					t.Errorf("CLI() = %q; want %q", got, tt.cli)
				}
			}
			keysTo(t, m, tt.keys[len(tt.keys)-1])
			if got := f.actions(); len(got) != 1 || got[0] != tt.want {
				t.Fatalf("calls %+v; want [%+v]", got, tt.want)
			}
			if !strings.Contains(screen(m), tt.message) {
				t.Errorf("screen lacks %q:\n%s", tt.message, screen(m))
			}
		})
	}
	// the selected VM's autostart is on its detail line
	m := loaded(t, term.Plain, &fakeManager{entries: entries()}, writer())
	keysTo(t, m, "j")
	if d := ansi.Strip(m.detailLine()); !strings.Contains(d, "web-02: autostart (order 2, delay 10s)") {
		t.Errorf("detail line %q; want the autostart note", d)
	}
	// refused where nothing acts: a guest not ours, a read-only session
	for _, tc := range []struct {
		name string
		sess *common.Session
		down int
	}{{"external", writer(), 4}, {"read-only", &common.Session{User: "nobody", TTY: "tty1"}, 0}} {
		f := &fakeManager{entries: entries()}
		m := loaded(t, term.Plain, f, tc.sess)
		for range tc.down {
			keysTo(t, m, "j")
		}
		keysTo(t, m, "t")
		if got := f.actions(); len(got) != 0 {
			t.Errorf("%s: t ran %+v; want a refusal", tc.name, got)
		}
	}
}
