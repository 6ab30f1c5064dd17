package network

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

var fixedNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func testConfig() *netcfg.Config {
	return &netcfg.Config{
		APIVersion: netcfg.APIVersion, Kind: netcfg.Kind,
		Hostname:   "esx-lab-01",
		DNS:        netcfg.DNS{Servers: []string{"192.168.10.53", "1.1.1.1"}},
		Management: &netcfg.Management{Interface: "eno1", Addresses: []string{"192.168.10.5/24"}, Gateway: "192.168.10.1"},
		Bridges: []netcfg.Bridge{
			{Name: "br0", Ports: []string{"eno3"}, Addresses: []string{"10.0.0.1/24"}},
			{Name: "br1", STP: true},
		},
		Networks: []netcfg.Network{
			{Name: "lan", Type: netcfg.NetworkBridged, Bridge: "br0"},
			{Name: "default", Type: netcfg.NetworkNAT, Bridge: "vcnat0", Subnet: "10.77.0.0/24"},
		},
	}
}

func testState() *netcfg.State {
	return &netcfg.State{
		Links: []netcfg.Link{
			{Name: "lo", Type: "device", Index: 1, MTU: 65536, Up: true},
			{Name: "eno1", Type: "device", Index: 2, MTU: 1500, Up: true, Addresses: []netip.Prefix{netip.MustParsePrefix("192.168.10.5/24")}},
			{Name: "eno2", Type: "device", Index: 3, MTU: 1500},
			{Name: "eno3", Type: "device", Index: 4, MTU: 1500, Up: true, Master: "br0"},
			{Name: "br0", Type: "bridge", Index: 5, MTU: 1500, Up: true, Addresses: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24")}},
		},
		Routes: []netcfg.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("192.168.10.1"), Link: "eno1", Protocol: 4}},
	}
}

// fakeSources records the calls that change the host.
type fakeSources struct {
	mu                 sync.Mutex
	desired, applied   *netcfg.Config
	pending            *netcfg.Pending
	applyErr           error
	applies            []*netcfg.Config
	applyOpts          []netcfg.DesiredOptions
	confirms, rollback int
	tested             int
	testedCfgs         []*netcfg.Config
	// desiredErr fails LoadDesired (a broken network.yaml); fallback and
	// fallbackWhy are then what LoadDesiredOrFallback returns.
	desiredErr  error
	fallback    *netcfg.Config
	fallbackWhy string
	// onTrial, when set, is what LoadEffective returns: the file on trial.
	onTrial *netcfg.Config
	// ctxCalls are the calls that took a ctx, each with ctx.Err() then.
	ctxCalls []ctxCall
}

type ctxCall struct {
	name string
	err  error
}

func (f *fakeSources) sawCtx(name string, ctx context.Context) {
	f.mu.Lock()
	f.ctxCalls = append(f.ctxCalls, ctxCall{name, ctx.Err()})
	f.mu.Unlock()
}

func newFake() *fakeSources {
	return &fakeSources{desired: testConfig(), applied: testConfig()}
}

func (f *fakeSources) LoadDesired() (*netcfg.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.desiredErr != nil {
		return nil, f.desiredErr
	}
	return f.desired.Clone(), nil
}

func (f *fakeSources) LoadDesiredOrFallback() (*netcfg.Config, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.desiredErr != nil {
		return f.fallback.Clone(), f.fallbackWhy
	}
	return f.desired.Clone(), ""
}

func (f *fakeSources) LoadEffective() (*netcfg.Config, error) {
	f.mu.Lock()
	onTrial := f.onTrial
	f.mu.Unlock()
	if onTrial != nil {
		return onTrial.Clone(), nil
	}
	return f.LoadDesired()
}

func (f *fakeSources) LoadApplied() (*netcfg.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied.Clone(), nil
}

func (f *fakeSources) ReadState(ctx context.Context) (*netcfg.State, error) {
	f.sawCtx("ReadState", ctx)
	return testState(), nil
}

func (f *fakeSources) PendingTry() (*netcfg.Pending, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending, nil
}

// trial is a pending try as ApplyDesired leaves it: started 3 s before
// fixedNow, so the dialog shows 0:57.
func trial(old *netcfg.Config) *netcfg.Pending {
	p := &netcfg.Pending{ID: "t1", Started: fixedNow.Add(-3 * time.Second), Deadline: fixedNow.Add(57 * time.Second)}
	if old != nil {
		p.Applied, _ = yaml.Marshal(old)
	}
	return p
}

func (f *fakeSources) ApplyDesired(ctx context.Context, cfg *netcfg.Config, opts netcfg.DesiredOptions) (*netcfg.Result, *netcfg.Pending, error) {
	f.sawCtx("ApplyDesired", ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies = append(f.applies, cfg)
	f.applyOpts = append(f.applyOpts, opts)
	if f.applyErr != nil {
		return nil, nil, f.applyErr
	}
	f.pending = trial(f.applied)
	f.applied = cfg
	return &netcfg.Result{Steps: []string{"x"}, Changed: true}, f.pending, nil
}

func (f *fakeSources) ConfirmDesired(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirms++
	f.pending = nil
	return nil
}

func (f *fakeSources) RollbackDesired(ctx context.Context) error {
	f.sawCtx("RollbackDesired", ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rollback++
	f.pending = nil
	return nil
}

func (f *fakeSources) CheckManagement(ctx context.Context, cfg *netcfg.Config, _ netcfg.CheckOptions) []netcfg.CheckResult {
	f.sawCtx("CheckManagement", ctx)
	f.mu.Lock()
	f.tested++
	f.testedCfgs = append(f.testedCfgs, cfg)
	f.mu.Unlock()
	return []netcfg.CheckResult{
		{Name: "link " + cfg.Management.Interface, OK: true, Detail: "up, carrier"},
		{Name: "gateway 192.168.10.1 ping", OK: true, Detail: "echo reply in 0.31 ms"},
		{Name: "dns 192.168.10.53", OK: false, Detail: "no answer"},
	}
}

func (f *fakeSources) NICs(ctx context.Context) ([]string, error) {
	f.sawCtx("NICs", ctx)
	return testState().NICs(), nil
}

func newModel(t *testing.T, tier term.Tier, src Sources, writer bool) *Model {
	t.Helper()
	return newModelIn(t, context.Background(), tier, src, writer)
}

// newModelIn is newModel in the session ctx.
func newModelIn(t *testing.T, ctx context.Context, tier term.Tier, src Sources, writer bool) *Model {
	t.Helper()
	c := common.New(ctx, tier, testutil.Logger(t))
	c.Now = func() time.Time { return fixedNow }
	c.Session = &common.Session{User: "root", TTY: "tty1", Writer: writer}
	if !writer {
		c.Session.User, c.Session.Holder = "bob", "alice on tty1 since 09:12"
	}
	m := New(c, src, Options{})
	m.SetSize(76, 17)
	return m
}

// drive runs cmd and feeds what it returns back into the model, as the
// program would, synchronously.
func drive(t *testing.T, m *Model, cmd tea.Cmd) {
	t.Helper()
	var run func(cmd tea.Cmd, depth int)
	run = func(cmd tea.Cmd, depth int) {
		if cmd == nil {
			return
		}
		if depth > 20 {
			t.Fatal("commands do not settle")
		}
		msg := cmd()
		if b, ok := msg.(tea.BatchMsg); ok {
			for _, c := range b {
				run(c, depth+1)
			}
			return
		}
		if msg == nil {
			return
		}
		_, next := m.Update(msg)
		run(next, depth+1)
	}
	run(cmd, 0)
}

func send(t *testing.T, m *Model, msgs ...tea.Msg) {
	t.Helper()
	for _, msg := range msgs {
		_, cmd := m.Update(msg)
		drive(t, m, cmd)
	}
}

func press(t *testing.T, m *Model, keys ...string) {
	t.Helper()
	for _, k := range tuitest.Keys(keys...) {
		send(t, m, k)
	}
}

func typeText(t *testing.T, m *Model, s string) {
	t.Helper()
	for _, k := range tuitest.Type(s) {
		send(t, m, k)
	}
}

func screen(m *Model) string { return ansi.Strip(m.Render()) }

func loaded(t *testing.T, tier term.Tier, src Sources, writer bool) *Model {
	t.Helper()
	m := newModel(t, tier, src, writer)
	send(t, m, common.ActivateMsg{})
	if !m.loaded {
		t.Fatal("not loaded after ActivateMsg")
	}
	return m
}

func mustContain(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("screen lacks %q:\n%s", w, text)
		}
	}
}

// TestEditApplyKeep is the whole flow: edit the management address, see
// the diff and the plan, apply on a 60 s trial, see the countdown, keep.
func TestEditApplyKeep(t *testing.T) {
	f := newFake()
	m := loaded(t, term.Plain, f, true)
	press(t, m, "e")
	if m.mode != modeForm || !m.Capturing() {
		t.Fatalf("after e: mode %d, capturing %t; want the form, capturing", m.mode, m.Capturing())
	}
	press(t, m, "tab", "ctrl+u")
	typeText(t, m, "192.168.10.7/24")
	press(t, m, "ctrl+s")
	if m.mode != modeDiff {
		t.Fatalf("after submit: mode %d; want the review; form errors %q", m.mode, m.form.errs)
	}
	mustContain(t, screen(m), "- management.addresses: 192.168.10.5/24", "+ management.addresses: 192.168.10.7/24",
		"Steps on the host", "192.168.10.7/24", "Apply with a 60 s trial?")
	if got, want := m.CLI(), "virt net apply -f /etc/virtcon/network.yaml --try 60s"; got != want {
		t.Errorf("CLI = %q; want %q", got, want)
	}
	if len(f.applies) != 0 {
		t.Fatal("applied before the review was confirmed")
	}
	press(t, m, "y")
	if len(f.applies) != 1 || f.applyOpts[0].Try != 60*time.Second {
		t.Fatalf("ApplyDesired calls %d, options %+v; want one with Try 60s", len(f.applies), f.applyOpts)
	}
	if got := f.applies[0].Management.Addresses; len(got) != 1 || got[0] != "192.168.10.7/24" {
		t.Errorf("applied addresses %v; want [192.168.10.7/24]", got)
	}
	if m.mode != modeKeep || !m.Capturing() {
		t.Fatalf("after the apply: mode %d; want the keep dialog, capturing", m.mode)
	}
	mustContain(t, screen(m), "Keep these network settings?", "Rolling back in 0:57", "09:27:50")
	// a second later
	m.c.Now = func() time.Time { return fixedNow.Add(time.Second) }
	send(t, m, common.TickMsg{Now: fixedNow.Add(time.Second)})
	mustContain(t, screen(m), "Rolling back in 0:56")
	press(t, m, "k")
	if f.confirms != 1 || f.rollback != 0 {
		t.Fatalf("confirms %d, rollbacks %d; want one confirm", f.confirms, f.rollback)
	}
	if m.mode != modeMain {
		t.Errorf("after keep: mode %d; want main", m.mode)
	}
	mustContain(t, screen(m), "[PASS] kept")
}

// Enter on the keep dialog presses the focused button, which starts on
// [Roll back]: enter alone never keeps by accident.
func TestKeepDialogButtons(t *testing.T) {
	for _, tc := range []struct {
		keys               []string
		confirms, rollback int
	}{
		{[]string{"enter"}, 0, 1},
		{[]string{"esc"}, 0, 1},
		{[]string{"b"}, 0, 1},
		{[]string{"right", "enter"}, 1, 0},
		{[]string{"k"}, 1, 0},
		{[]string{"y", "n", "q", "s"}, 0, 0},
	} {
		f := newFake()
		f.pending = trial(testConfig())
		m := loaded(t, term.Plain, f, true)
		for _, k := range tuitest.Keys(tc.keys...) {
			send(t, m, k)
		}
		if f.confirms != tc.confirms || f.rollback != tc.rollback {
			t.Errorf("keys %q: confirms %d, rollbacks %d; want %d, %d", tc.keys, f.confirms, f.rollback, tc.confirms, tc.rollback)
		}
	}
}

// A try started elsewhere shows the dialog when the screen opens; when
// nobody keeps it, the watchdog rolls it back and the screen says so.
func TestTrialRollsBackByDefault(t *testing.T) {
	f := newFake()
	old := testConfig()
	f.pending = trial(old)
	f.applied = testConfig()
	f.applied.Hostname = "new-name" // what the try applied
	m := loaded(t, term.Rich, f, true)
	if m.mode != modeKeep {
		t.Fatalf("mode %d with a try pending; want the keep dialog", m.mode)
	}
	mustContain(t, screen(m), "Rolling back in 0:57")
	// the deadline passes: the watchdog restores the old record
	m.c.Now = func() time.Time { return fixedNow.Add(58 * time.Second) }
	send(t, m, common.TickMsg{Now: fixedNow.Add(58 * time.Second)})
	mustContain(t, screen(m), "Rolling back now")
	f.mu.Lock()
	f.pending, f.applied = nil, old
	f.mu.Unlock()
	send(t, m, common.TickMsg{Now: fixedNow.Add(59 * time.Second)})
	if m.mode != modeMain {
		t.Fatalf("mode %d after the try ended; want main", m.mode)
	}
	mustContain(t, screen(m), "rolled back")
	if f.confirms != 0 || f.rollback != 0 {
		t.Errorf("the screen confirmed (%d) or rolled back (%d) by itself", f.confirms, f.rollback)
	}
}

func TestTrialKeptElsewhere(t *testing.T) {
	f := newFake()
	f.pending = trial(testConfig())
	m := loaded(t, term.Plain, f, true)
	f.mu.Lock()
	f.pending = nil
	f.applied = testConfig()
	f.applied.Hostname = "new-name"
	f.mu.Unlock()
	send(t, m, common.TickMsg{Now: fixedNow})
	mustContain(t, screen(m), "kept: the trial was confirmed elsewhere")
}

func TestFormValidation(t *testing.T) {
	tests := []struct {
		name  string
		field int // tabs from the interface field
		value string
		wants []string
	}{
		{"gateway outside the subnet", 2, "10.9.9.9", []string{"management.gateway", `"10.9.9.9"`, "none of the subnets"}},
		{"not a CIDR", 1, "192.168.10.7", []string{"management.addresses[0]", `"192.168.10.7"`}},
		{"VLAN not a number", 3, "abc", []string{"management.vlan", `"abc"`, "whole number"}},
		{"bad DNS server", 5, "dns.example", []string{"dns.servers[0]", `"dns.example"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			m := loaded(t, term.Plain, f, true)
			press(t, m, "e")
			for range tc.field {
				press(t, m, "tab")
			}
			press(t, m, "ctrl+u")
			typeText(t, m, tc.value)
			press(t, m, "ctrl+s")
			if m.mode != modeForm {
				t.Fatalf("mode %d after an invalid submit; want the form still open", m.mode)
			}
			mustContain(t, screen(m), append([]string{"[FAIL]"}, tc.wants...)...)
			press(t, m, "esc")
			if m.mode != modeMain || len(f.applies) != 0 {
				t.Errorf("after esc: mode %d, %d applies; want main and nothing applied", m.mode, len(f.applies))
			}
		})
	}
}

// TestFormEnterReviews: enter in a form does what the form's legend says
// ("^S/enter review") from whichever field has the focus, as ctrl+s does;
// tab moves between fields.
func TestFormEnterReviews(t *testing.T) {
	tests := []struct {
		name  string
		open  []string // keys that open the form, then keys in it
		typed string
		wants []string
	}{
		{"add bridge, enter in the name", []string{"a"}, "br9", []string{"Review: add bridge br9", "+ bridges[br9].name: br9"}},
		{"add bridge, enter in the ports", []string{"a", "tab"}, "eno2", []string{"[FAIL] bridges[2].name"}},
		{"edit bridge, enter in the addresses", []string{"enter", "tab", "tab", "ctrl+u"}, "192.0.2.1/24", []string{"Review: edit bridge br0", "192.0.2.1/24"}},
		{"management, enter in the interface", []string{"e", "ctrl+u"}, "eno2", []string{"Review: edit the management interface", "eno2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := loaded(t, term.Plain, newFake(), true)
			press(t, m, tc.open...)
			if m.mode != modeForm {
				t.Fatalf("mode %d after %v; want a form", m.mode, tc.open)
			}
			legend := ""
			for _, b := range m.ShortHelp() {
				legend += b.Help().Key + " " + b.Help().Desc + " "
			}
			if !strings.Contains(legend, "enter review") {
				t.Fatalf("form legend %q does not say enter reviews", legend)
			}
			typeText(t, m, tc.typed)
			focus := m.form.focus
			press(t, m, "enter")
			if m.mode == modeForm && len(m.form.errs) == 0 {
				t.Fatalf("enter moved the focus (field %d to %d) instead of reviewing:\n%s", focus, m.form.focus, screen(m))
			}
			mustContain(t, screen(m), tc.wants...)
		})
	}
}

// TestReadOnlyRefuses: a console without the writer lock opens no form
// and changes nothing; it says who holds the lock.
func TestReadOnlyRefuses(t *testing.T) {
	for _, k := range []string{"e", "a", "enter", "delete", "z", "c", "b"} {
		f := newFake()
		f.pending = nil
		m := loaded(t, term.Plain, f, false)
		if k == "c" || k == "b" {
			f.pending = trial(testConfig())
			m.pending = f.pending
		}
		press(t, m, k)
		if m.mode != modeMain || m.Capturing() {
			t.Errorf("key %q on a read-only console: mode %d; want main", k, m.mode)
		}
		mustContain(t, screen(m), "read-only: alice on tty1 since 09:12 holds the console lock")
		if len(f.applies)+f.confirms+f.rollback != 0 {
			t.Errorf("key %q on a read-only console changed the host", k)
		}
	}
	// the keep dialog only watches there
	f := newFake()
	f.pending = trial(testConfig())
	m := loaded(t, term.Plain, f, false)
	if m.mode != modeKeep || m.Capturing() {
		t.Fatalf("read-only console with a try: mode %d capturing %t; want the dialog, not capturing", m.mode, m.Capturing())
	}
	press(t, m, "k")
	press(t, m, "enter")
	if f.confirms+f.rollback != 0 {
		t.Error("a read-only console kept or rolled back the try")
	}
	mustContain(t, screen(m), "only the console holding the lock can keep it")
}

func TestTestManagement(t *testing.T) {
	f := newFake()
	m := loaded(t, term.Plain, f, false) // a read-only console may test
	press(t, m, "t")
	if f.tested != 1 {
		t.Fatalf("CheckManagement called %d times; want 1", f.tested)
	}
	mustContain(t, screen(m), "[PASS] link eno1", "up, carrier", "[FAIL] dns 192.168.10.53", "no answer",
		"the management network has a problem")
	if got := m.CLI(); got != "virt net test" {
		t.Errorf("CLI = %q; want virt net test", got)
	}
	press(t, m, "esc")
	if m.mode != modeMain {
		t.Errorf("esc did not close the results")
	}
}

// TestTestManagementDuringTrial: while a try is pending the test checks
// the configuration on trial, not network.yaml.
func TestTestManagementDuringTrial(t *testing.T) {
	f := newFake()
	f.pending = trial(testConfig())
	f.onTrial = testConfig()
	f.onTrial.Management = &netcfg.Management{Interface: "eno2", DHCP: true}
	m := loaded(t, term.Plain, f, true)
	// a form was open when the try began, then closed: the main view
	m.mode = modeMain
	press(t, m, "t")
	if len(f.testedCfgs) != 1 {
		t.Fatalf("CheckManagement called %d times; want 1", len(f.testedCfgs))
	}
	if got := f.testedCfgs[0].Management; got == nil || got.Interface != "eno2" || !got.DHCP {
		t.Errorf("tested management %+v; want the one on trial (eno2, DHCP)", got)
	}
	mustContain(t, screen(m), "[PASS] link eno2")
}

// TestResetWithBrokenFile: a network.yaml that does not decode blocks
// every edit but the DHCP reset, which starts from the fallback and says
// why.
func TestResetWithBrokenFile(t *testing.T) {
	f := newFake()
	f.desiredErr = errors.New("/etc/virtcon/network.yaml: invalid network configuration: yaml: line 3: did not find expected key")
	f.fallback = testConfig()
	f.fallbackWhy = f.desiredErr.Error() + "; starting from the applied configuration /var/lib/virtcon/network/applied.yaml instead"
	m := loaded(t, term.Plain, f, true)
	mustContain(t, screen(m), "[FAIL] /etc/virtcon/network.yaml: invalid network configuration")
	press(t, m, "e")
	if m.mode != modeMain {
		t.Fatalf("e with a broken file: mode %d; want main", m.mode)
	}
	press(t, m, "z")
	if m.mode != modeNICs {
		t.Fatalf("z with a broken file: mode %d; want the NIC list (screen:\n%s)", m.mode, screen(m))
	}
	press(t, m, "j", "enter")
	if m.mode != modeDiff {
		t.Fatalf("mode %d after picking eno2; want the review (screen:\n%s)", m.mode, screen(m))
	}
	mustContain(t, screen(m), "starting from the applied", "- management.interface: eno1")
	press(t, m, "y")
	if len(f.applies) != 1 {
		t.Fatalf("ApplyDesired calls %d; want 1", len(f.applies))
	}
	got := f.applies[0]
	if got.Management == nil || got.Management.Interface != "eno2" || !got.Management.DHCP || len(got.Bridges) != 2 {
		t.Errorf("applied %+v; want the fallback with DHCP on eno2 and its bridges", got)
	}
}

func TestResetToDHCP(t *testing.T) {
	f := newFake()
	m := loaded(t, term.Plain, f, true)
	press(t, m, "z")
	if m.mode != modeNICs {
		t.Fatalf("mode %d after z; want the NIC list", m.mode)
	}
	mustContain(t, screen(m), "eno1", "(management now)", "eno2", "eno3", "(port of br0)")
	if got, want := m.CLI(), "virt net reset-dhcp eno1 --try 60s"; got != want {
		t.Errorf("CLI = %q; want %q", got, want)
	}
	// eno3 is a port of br0: refused, naming the field
	press(t, m, "j", "j", "enter")
	mustContain(t, screen(m), "[FAIL] management.interface", "port of bridge \"br0\"")
	press(t, m, "z", "j", "enter")
	if m.mode != modeDiff {
		t.Fatalf("mode %d after picking eno2; want the review", m.mode)
	}
	mustContain(t, screen(m), "- management.interface: eno1", "+ management.interface: eno2", "+ management.dhcp: true")
	if got, want := m.CLI(), "virt net reset-dhcp eno2 --try 60s"; got != want {
		t.Errorf("CLI = %q; want %q", got, want)
	}
	press(t, m, "n")
	if len(f.applies) != 0 || m.mode != modeMain {
		t.Errorf("n applied (%d) or stayed (mode %d)", len(f.applies), m.mode)
	}
}

// TestConfirmationsCancelOnAnyOtherKey: the review (apply on trial) and
// the bridge delete dialog answer as every confirmation does: y goes on,
// any other key cancels and changes nothing.
func TestConfirmationsCancelOnAnyOtherKey(t *testing.T) {
	for _, k := range []string{"enter", "n", "esc", "tab", "right", "q", "k", "b"} {
		t.Run(k, func(t *testing.T) {
			f := newFake()
			m := loaded(t, term.Plain, f, true)
			press(t, m, "e", "tab", "ctrl+u")
			typeText(t, m, "192.168.10.7/24")
			press(t, m, "ctrl+s")
			if m.mode != modeDiff {
				t.Fatalf("mode %d; want the review", m.mode)
			}
			mustContain(t, screen(m), "Press y to apply it on trial; any other key cancels.")
			press(t, m, k)
			if m.mode != modeMain || len(f.applies) != 0 {
				t.Errorf("review after %q: mode %d, %d applies; want main, none", k, m.mode, len(f.applies))
			}
			press(t, m, "j", "-")
			if m.mode != modeDelete {
				t.Fatalf("mode %d; want the delete dialog", m.mode)
			}
			mustContain(t, screen(m), "Delete bridge br1?", "Press y to delete it and review the change; any other key cancels.")
			press(t, m, k)
			if m.mode != modeMain {
				t.Errorf("delete dialog after %q: mode %d; want main", k, m.mode)
			}
			mustContain(t, screen(m), "cancelled: nothing changed")
		})
	}
}

func TestBridges(t *testing.T) {
	f := newFake()
	m := loaded(t, term.Plain, f, true)
	// br0 carries network lan
	press(t, m, "delete", "y")
	mustContain(t, screen(m), `bridge "br0" carries network "lan"`)
	press(t, m, "j", "-")
	if m.mode != modeDelete || m.CLI() != "virt net bridge delete br1 --try 60s" {
		t.Fatalf("mode %d, CLI %q; want the delete dialog for br1", m.mode, m.CLI())
	}
	press(t, m, "enter") // any key but y cancels
	if m.mode != modeMain {
		t.Fatalf("enter on the delete dialog left mode %d", m.mode)
	}
	press(t, m, "-", "y")
	mustContain(t, screen(m), "- bridges[br1].name: br1", "- bridges[br1].stp: true")

	// add a bridge: the CLI line follows the form
	press(t, m, "esc", "a")
	typeText(t, m, "br2")
	press(t, m, "tab")
	typeText(t, m, "eno2")
	if got, want := m.CLI(), "virt net bridge create br2 --port eno2 --try 60s"; got != want {
		t.Errorf("CLI = %q; want %q", got, want)
	}
	press(t, m, "tab", "tab", "space", "enter")
	if m.mode != modeDiff {
		t.Fatalf("mode %d after adding br2; want the review; errors %q", m.mode, m.form.errs)
	}
	mustContain(t, screen(m), "+ bridges[br2].name: br2", "+ bridges[br2].ports: eno2", "+ bridges[br2].stp: true", "create bridge br2")

	// a duplicate name is a field error
	press(t, m, "esc", "a")
	typeText(t, m, "br0")
	press(t, m, "ctrl+s")
	mustContain(t, screen(m), "[FAIL] bridges[2].name", `"br0"`)
}

func TestApplyFailureShown(t *testing.T) {
	f := newFake()
	f.applyErr = errors.New("try: verify: network check failed after 30s: link \"eno1\" has no carrier; the previous state is restored")
	m := loaded(t, term.Plain, f, true)
	press(t, m, "e", "tab", "tab", "ctrl+u")
	typeText(t, m, "192.168.10.254")
	press(t, m, "ctrl+s", "y")
	if m.mode != modeMain {
		t.Fatalf("mode %d after a failed apply; want main", m.mode)
	}
	mustContain(t, screen(m), "[FAIL] not applied: try: verify")
}

// A try started elsewhere since the last load (the CLI, another console)
// makes the core refuse the apply: the screen says so, with the keys of
// the keep dialog that the reload brings up for it.
func TestApplyRefusedDuringTryShown(t *testing.T) {
	f := newFake()
	f.applyErr = &netcfg.TryPendingError{ID: "t9", Deadline: fixedNow.Add(40 * time.Second)}
	m := loaded(t, term.Plain, f, true)
	f.pending = trial(testConfig()) // started elsewhere
	press(t, m, "e", "tab", "tab", "ctrl+u")
	typeText(t, m, "192.168.10.254")
	press(t, m, "ctrl+s", "y")
	if m.mode != modeKeep {
		t.Fatalf("mode %d after the refusal; want the keep dialog for the try", m.mode)
	}
	mustContain(t, screen(m), "[FAIL] not applied: a change is on trial; keep (k) or roll back (b) first")
}

// TestKeysAvoidReserved: outside forms and dialogs the screen binds no
// letter the global key map reserves.
func TestKeysAvoidReserved(t *testing.T) {
	m := loaded(t, term.Plain, newFake(), true)
	m.pending = trial(nil)
	for _, b := range m.ShortHelp() {
		for _, k := range b.Keys() {
			if len([]rune(k)) == 1 && strings.ContainsRune(keys.Reserved, []rune(k)[0]) {
				t.Errorf("binding %q uses the reserved key %q", b.Help().Desc, k)
			}
		}
	}
	for _, k := range []string{"e", "a", "t", "z", "c", "b", "j", "k", "-"} {
		if strings.Contains(keys.Reserved, k) {
			t.Errorf("screen key %q is reserved", k)
		}
	}
}

// views renders every view of the screen in one tier.
func views(t *testing.T, tier term.Tier) map[string]string {
	t.Helper()
	f := newFake()
	out := map[string]string{}
	m := loaded(t, tier, f, true)
	m.say(0, "kept: the new settings are in /etc/virtcon/network.yaml")
	out["main"] = m.Render()
	press(t, m, "e")
	out["form"] = m.Render()
	press(t, m, "tab", "tab", "ctrl+u")
	typeText(t, m, "10.9.9.9")
	press(t, m, "ctrl+s")
	out["form-error"] = m.Render()
	press(t, m, "ctrl+u")
	typeText(t, m, "192.168.10.254")
	press(t, m, "ctrl+s")
	out["diff"] = m.Render()
	press(t, m, "y")
	out["keep"] = m.Render()
	press(t, m, "k", "t")
	out["test"] = m.Render()
	press(t, m, "esc", "z")
	out["nics"] = m.Render()
	press(t, m, "esc", "j", "-")
	out["delete"] = m.Render()
	return out
}

var goldenViews = []string{"main", "form", "diff", "keep"}

func TestGolden(t *testing.T) {
	for _, tier := range tuitest.GoldenTiers {
		vs := views(t, tier)
		for _, name := range goldenViews {
			t.Run(tier.String()+"/"+name, func(t *testing.T) {
				tuitest.RequireGolden(t, tier, vs[name], 76, 17)
			})
		}
	}
}

func TestViewsFit(t *testing.T) {
	for _, tier := range []term.Tier{term.Rich, term.Linux, term.Plain} {
		for name, out := range views(t, tier) {
			t.Run(tier.String()+"/"+name, func(t *testing.T) { tuitest.CheckSize(t, out, 76, 17) })
		}
	}
}

func TestPlainIsASCII(t *testing.T) {
	for name, out := range views(t, term.Plain) {
		t.Run(name, func(t *testing.T) { tuitest.RequireASCII(t, out) })
	}
	m := loaded(t, term.Plain, newFake(), true)
	for _, col := range m.FullHelp() {
		for _, b := range col {
			tuitest.RequireASCII(t, b.Help().Key+b.Help().Desc)
		}
	}
}

// TestUpdateNeverBlocks: a slow host does not hold up keys.
func TestUpdateNeverBlocks(t *testing.T) {
	m := loaded(t, term.Plain, newFake(), true)
	start := time.Now()
	_, cmd := m.Update(common.RefreshMsg{})
	if cmd == nil {
		t.Fatal("refresh returned no load command")
	}
	m.Update(tuitest.Key("t"))
	m.Update(tuitest.Key("esc"))
	m.Update(tuitest.Key("e"))
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("Update took %v; it must not do I/O", d)
	}
}

// TestReloadDuringForm: the file changes on another console while a
// bridge form is open, and F5 reloads: the form keeps working on the file
// it opened with (its field paths index that file's bridges).
func TestReloadDuringForm(t *testing.T) {
	f := newFake()
	m := loaded(t, term.Plain, f, true)
	press(t, m, "a")
	typeText(t, m, "br9")
	f.mu.Lock()
	f.desired.Bridges = append(f.desired.Bridges, netcfg.Bridge{Name: "brother"})
	f.desired.Bridges[0], f.desired.Bridges[len(f.desired.Bridges)-1] = f.desired.Bridges[len(f.desired.Bridges)-1], f.desired.Bridges[0]
	f.mu.Unlock()
	send(t, m, common.RefreshMsg{})
	if got, want := m.CLI(), "virt net bridge create br9 --try 60s"; got != want {
		t.Errorf("CLI after a reload = %q; want %q", got, want)
	}
	_ = screen(m)
	press(t, m, "ctrl+s")
	if m.mode != modeDiff {
		t.Fatalf("mode %d after submitting; want the review; errors %q", m.mode, m.form.errs)
	}
	mustContain(t, screen(m), "+ bridges[br9].name: br9")
}

// TestCallsEndWithTheSession: every host call runs under the session's
// context, so ending the session (a closed web terminal, a signal) cuts
// short what runs instead of leaving it to its own timeout.
func TestCallsEndWithTheSession(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	m := newModelIn(t, ctx, term.Plain, f, true)
	send(t, m, common.ActivateMsg{})
	cancel()
	send(t, m, common.RefreshMsg{})     // ReadState
	press(t, m, "t", "esc")             // CheckManagement
	press(t, m, "z", "j", "enter", "y") // NICs, ApplyDesired
	press(t, m, "b")                    // RollbackDesired
	seen := map[string]bool{}
	for i, c := range f.ctxCalls {
		if i == 0 {
			continue // the load before the session ended
		}
		seen[c.name] = true
		if !errors.Is(c.err, context.Canceled) {
			t.Errorf("%s ran after the session ended with ctx error %v; want %v", c.name, c.err, context.Canceled)
		}
	}
	for _, name := range []string{"ReadState", "CheckManagement", "NICs", "ApplyDesired", "RollbackDesired"} {
		if !seen[name] {
			t.Errorf("%s was not called after the session ended (calls %+v)", name, f.ctxCalls)
		}
	}
	if err := f.ctxCalls[0].err; err != nil {
		t.Errorf("the load before the session ended saw ctx error %v; want none", err)
	}
}
