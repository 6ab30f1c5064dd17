package dcui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/virtcon/virtcon/diag"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/app"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/diagnostics"
	tuidirector "github.com/virtcon/virtcon/tui/director"
	"github.com/virtcon/virtcon/tui/hardware"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/logs"
	tuipower "github.com/virtcon/virtcon/tui/power"
	"github.com/virtcon/virtcon/tui/status"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
	"github.com/virtcon/virtcon/tui/vms"
	"github.com/virtcon/virtcon/vm"
	"github.com/virtcon/virtcon/webterm"
)

// These tests build the real app with the real screens, wired by
// buildPages as in production, over fakes that never touch the host, and
// check every screen inside the frame at 80x24.

var fixedNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func fakeReport() *hostinfo.Report {
	return &hostinfo.Report{
		Acceleration: hostinfo.AccelKVM, AccelerationReason: "KVM usable",
		Checks: []hostinfo.Check{
			{ID: "kvm.api", Status: hostinfo.Pass, Detail: "KVM API 12"},
			{ID: "hugepages", Status: hostinfo.Unknown, Detail: "1GiB pool: none reserved"},
			{ID: "iommu.kernel", Status: hostinfo.Warn, Detail: "IOMMU in passthrough mode (iommu=pt)",
				Hint: "fine for VFIO; drop iommu=pt if host DMA isolation matters more than speed"},
		},
	}
}

func hostSource(context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
	return fakehost.Inventory(), fakeReport(), nil
}

// fakeVMs is the VM core: two running VMs, a stopped one and a guest that
// is not ours. It records the actions; the screens here never confirm one.
type fakeVMs struct {
	mu    sync.Mutex
	calls []string
}

func vmEntries() []vm.Entry {
	return []vm.Entry{
		{Name: "web-01", UID: "6f1c2d3e-0001-4a5b-8c9d-0e1f2a3b4c5d", Class: vm.ClassManaged, Phase: vm.PhaseRunning, Accel: "kvm", PID: 4242, CPUs: 2, MemoryMiB: 2048},
		{Name: "db-01", UID: "6f1c2d3e-0002-4a5b-8c9d-0e1f2a3b4c5d", Class: vm.ClassManaged, Phase: vm.PhaseRunning, Accel: "kvm", PID: 5150, CPUs: 8, MemoryMiB: 16384},
		{Name: "build", UID: "6f1c2d3e-0003-4a5b-8c9d-0e1f2a3b4c5d", Class: vm.ClassManaged, Phase: vm.PhaseStopped, Accel: "kvm", CPUs: 4, MemoryMiB: 8192},
		{Name: "legacy-win", Class: vm.ClassExternal, Phase: vm.PhaseRunning, Accel: "kvm", PID: 777, Source: "libvirt",
			Message: "not managed by virtcon: listed read-only"},
	}
}

func (f *fakeVMs) List(context.Context) ([]vm.Entry, error) { return vmEntries(), nil }
func (f *fakeVMs) record(op, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op+" "+ref)
	return nil
}
func (f *fakeVMs) Start(_ context.Context, ref string) error { return f.record("start", ref) }
func (f *fakeVMs) Stop(_ context.Context, ref string, _ vm.StopOptions) error {
	return f.record("stop", ref)
}
func (f *fakeVMs) Reboot(_ context.Context, ref string) error { return f.record("reboot", ref) }
func (f *fakeVMs) Delete(_ context.Context, ref string, _ bool) error {
	return f.record("delete", ref)
}
func (f *fakeVMs) SetAutostart(_ context.Context, ref string, _ bool, _ int, _ time.Duration) error {
	return f.record("autostart", ref)
}

func (f *fakeVMs) Console(_ context.Context, ref string, _ io.Reader, _ io.Writer, _ func(*vm.VirtualMachine)) error {
	return f.record("console", ref)
}

// fakeNet is the network core: a static management address and one
// bridge, matching the live state; nothing is ever applied.
type fakeNet struct{}

func netConfig() *netcfg.Config {
	return &netcfg.Config{
		APIVersion: netcfg.APIVersion, Kind: netcfg.Kind,
		Hostname:   "esx-lab-01",
		DNS:        netcfg.DNS{Servers: []string{"192.168.10.53"}},
		Management: &netcfg.Management{Interface: "eno1", Addresses: []string{"192.168.10.5/24"}, Gateway: "192.168.10.1"},
		Bridges:    []netcfg.Bridge{{Name: "br0", Ports: []string{"eno2"}}},
		Networks:   []netcfg.Network{{Name: "lan", Type: netcfg.NetworkBridged, Bridge: "br0"}},
	}
}

func netState() *netcfg.State {
	return &netcfg.State{
		Links: []netcfg.Link{
			{Name: "lo", Type: "device", Index: 1, MTU: 65536, Up: true},
			{Name: "eno1", Type: "device", Index: 2, MTU: 1500, Up: true, Addresses: []netip.Prefix{netip.MustParsePrefix("192.168.10.5/24")}},
			{Name: "eno2", Type: "device", Index: 3, MTU: 1500, Up: true, Master: "br0"},
			{Name: "br0", Type: "bridge", Index: 4, MTU: 1500, Up: true},
		},
		Routes: []netcfg.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("192.168.10.1"), Link: "eno1", Protocol: 4}},
	}
}

var errNoHost = errors.New("the full-screen tests never change the host")

func (fakeNet) LoadDesired() (*netcfg.Config, error)             { return netConfig(), nil }
func (fakeNet) LoadApplied() (*netcfg.Config, error)             { return netConfig(), nil }
func (fakeNet) LoadEffective() (*netcfg.Config, error)           { return netConfig(), nil }
func (fakeNet) LoadDesiredOrFallback() (*netcfg.Config, string)  { return netConfig(), "" }
func (fakeNet) ReadState(context.Context) (*netcfg.State, error) { return netState(), nil }
func (fakeNet) PendingTry() (*netcfg.Pending, error)             { return nil, nil }
func (fakeNet) ConfirmDesired(context.Context) error             { return errNoHost }
func (fakeNet) RollbackDesired(context.Context) error            { return errNoHost }
func (fakeNet) NICs(context.Context) ([]string, error)           { return netState().NICs(), nil }
func (fakeNet) ApplyDesired(context.Context, *netcfg.Config, netcfg.DesiredOptions) (*netcfg.Result, *netcfg.Pending, error) {
	return nil, nil, errNoHost
}
func (fakeNet) CheckManagement(context.Context, *netcfg.Config, netcfg.CheckOptions) []netcfg.CheckResult {
	return []netcfg.CheckResult{{Name: "gateway 192.168.10.1 ping", OK: true, Detail: "echo reply in 0.31 ms"}}
}

const logDir = "/var/log/virtcon"

var logFiles = map[string]string{
	logDir + "/dcui.log": `time=2026-03-14T09:20:01.000Z level=INFO msg="dcui start" version=0.4.0 tier=rich tty=tty1 term=linux pid=812
time=2026-03-14T09:21:14.000Z level=INFO msg=login user=alice tty=tty1 result=ok
time=2026-03-14T09:22:40.000Z level=WARN msg="vms: action failed" vm=build action=starting err="vm \"build\": start: qemu exited: could not open disk image"
time=2026-03-14T09:25:02.000Z level=INFO msg="console locked" user=alice tty=tty1 why="locked by alice"
`,
	logDir + "/auth.log": `{"time":"2026-03-14T09:21:14Z","service":"virtcon","user":"alice","tty":"tty1","result":"success"}` + "\n",
	logDir + "/vms/6f1c2d3e-0001-4a5b-8c9d-0e1f2a3b4c5d/serial.log": "\x1b[0;32m[  OK  ]\x1b[0m Reached target Multi-User System.\n\nDebian GNU/Linux 12 web-01 ttyS0\n\nweb-01 login: ",
}

func logSources() logs.Sources {
	return logs.Sources{
		List: func(context.Context) ([]logs.LogFile, error) {
			return []logs.LogFile{
				{Name: "auth.log", Path: logDir + "/auth.log", Size: int64(len(logFiles[logDir+"/auth.log"]))},
				{Name: "dcui.log", Path: logDir + "/dcui.log", Size: int64(len(logFiles[logDir+"/dcui.log"]))},
				{Name: "web-01", VM: "web-01", Path: logDir + "/vms/6f1c2d3e-0001-4a5b-8c9d-0e1f2a3b4c5d/serial.log", Size: 90},
			}, nil
		},
		Read: func(_ context.Context, path string, _ int64) ([]byte, error) {
			d, ok := logFiles[path]
			if !ok {
				return nil, errors.New("read log " + path + ": no such file")
			}
			return []byte(d), nil
		},
	}
}

const diagDir = "/var/lib/virtcon/diagnostics"

func diagSources() diagnostics.Sources {
	return diagnostics.Sources{Dir: diagDir, Write: func(context.Context) (diag.Result, error) {
		return diag.Result{Path: diagDir + "/" + diag.FileName(fixedNow), Size: 48213,
			Files: []string{"version.json", "inventory.json", "checks.json", "errors.json"}}, nil
	}}
}

// fakePower counts the power actions; no test here confirms one.
type fakePower struct{ reboots, poweroffs int }

func (f *fakePower) sources() tuipower.Sources {
	return tuipower.Sources{
		VMs:      func(context.Context) ([]vm.Entry, error) { return vmEntries(), nil },
		Reboot:   func(context.Context) error { f.reboots++; return errNoHost },
		PowerOff: func(context.Context) error { f.poweroffs++; return errNoHost },
	}
}

func statusSources() status.Sources {
	return status.Sources{
		Host: hostSource,
		VMs:  func(context.Context) ([]vm.Entry, error) { return vmEntries(), nil },
		PendingTry: func() (*netcfg.Pending, error) {
			return nil, nil
		},
		Addresses: func() ([]status.Addr, error) {
			return []status.Addr{
				{Iface: "eno1", Prefix: netip.MustParsePrefix("192.168.10.5/24")},
				{Iface: "eno1", Prefix: netip.MustParsePrefix("2001:db8::5/64")},
			}, nil
		},
		WebTerminal: func() (*webterm.Record, error) {
			return &webterm.Record{Listen: "[::]:8443", PID: 9090,
				CertSHA256: "3A:5F:9C:01:7E:44:B2:D8:0C:61:AF:93:25:E8:7B:4D:10:C2:9E:58:F6:3B:A7:11:D4:82:6E:0F:B9:5A:C3:27",
				URLs:       []string{"https://192.168.10.5:8443/", "https://[2001:db8::5]:8443/"}}, nil
		},
		Usage: func() (hostinfo.Usage, error) {
			return hostinfo.Usage{CPUBusy: 300, CPUTotal: 1000, MemTotalBytes: 100 << 20, MemAvailableBytes: 60 << 20}, nil
		},
		Director: func() (*status.Director, error) {
			return &status.Director{Enrolled: true, Running: true, State: tuidirector.StateConnected,
				Line: "Director: connected to director.example.org:9443 · node 1a2b3c4d… · cert until 2026-04-13"}, nil
		},
	}
}

// fakeDirector is the node agent: enrolled and connected, or not
// enrolled; an enrolment records its join and changes nothing else.
type fakeDirector struct {
	mu    sync.Mutex
	st    *tuidirector.Status
	joins []enroll.Join
}

func connectedAgent() *fakeDirector {
	return &fakeDirector{st: &tuidirector.Status{Enrolled: true, Director: "director.example.org:9443",
		NodeID: "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", Pin: "sha256:3a5f9c017e44b2d80c61af9325e87b4d10c29e58f63ba711d4826e0fb95ac327",
		CertNotAfter: fixedNow.Add(30 * 24 * time.Hour), Running: true, State: tuidirector.StateConnected,
		LastHeartbeatAck: fixedNow.Add(-4 * time.Second)}}
}

func (f *fakeDirector) sources() tuidirector.Sources {
	return tuidirector.Sources{
		Status: func() (*tuidirector.Status, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.st, nil
		},
		Enroll: func(_ context.Context, j enroll.Join) (*tuidirector.Status, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.joins = append(f.joins, j)
			f.st = &tuidirector.Status{Enrolled: true, Director: j.Addr(), NodeID: "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
				Pin: j.Pin(), CertNotAfter: fixedNow.Add(30 * 24 * time.Hour), State: tuidirector.StateStopped}
			return f.st, nil
		},
	}
}

type fakeIdle struct{}

func (fakeIdle) Touch()        {}
func (fakeIdle) Expired() bool { return false }

// rig is the real app over fakes, driven synchronously: each message's
// commands run to completion before the next key, so a capture never
// races a load.
type rig struct {
	t        *testing.T
	m        *app.Model
	vms      *fakeVMs
	power    *fakePower
	pages    []app.Page
	released int
}

func newRig(t *testing.T, tier term.Tier) *rig {
	t.Helper()
	return newRigWith(t, tier, statusSources())
}

// newRigWith is newRig with the status screen over src.
func newRigWith(t *testing.T, tier term.Tier, src status.Sources) *rig {
	t.Helper()
	return newRigAgent(t, tier, src, connectedAgent())
}

// newRigAgent is newRigWith with the Director screen over agent.
func newRigAgent(t *testing.T, tier term.Tier, src status.Sources, agent *fakeDirector) *rig {
	t.Helper()
	r := &rig{t: t, vms: &fakeVMs{}, power: &fakePower{}}
	c := common.New(context.Background(), tier, testutil.Logger(t))
	c.Now = func() time.Time { return fixedNow }
	st := status.New(c, src, status.Options{Product: "virtcon", Version: "0.4.0"})
	r.pages = buildPages(c, pageDeps{
		vms:         r.vms,
		vmOpts:      vms.Options{}, // no virt binary: the console is refused
		network:     fakeNet{},
		hardware:    hardware.Sources{Host: hostSource},
		logs:        logSources(),
		diagnostics: diagSources(),
		power:       r.power.sources(),
		director:    agent.sources(),
	})
	login := app.LoginFunc(func(_ context.Context, user, password, _ string) (string, error) {
		if user == "alice" && password == "s3cret" {
			return user, nil
		}
		return "", errors.New("login incorrect")
	})
	locker := func(user, tty string) (func() error, string, error) {
		return func() error { r.released++; return nil }, "", nil
	}
	r.m = app.New(c, st, r.pages, login, locker, fakeIdle{}, app.Options{
		Product: "virtcon", Version: "0.4.0", TTY: "tty1", IdleTimeout: 5 * time.Minute, Hostname: "esx-lab-01",
	})
	r.m.SetSize(80, 24)
	r.drain(r.m.Init())
	return r
}

// timerWait tells a timer (the app's and the status screen's one-second
// ticks) from a load: every fake answers at once, a tick not before a
// second.
const timerWait = 300 * time.Millisecond

// drain runs cmd and feeds what it returns back into the app until no
// command is left but timers, which it drops: the captures are of a
// moment, not of the clock.
func (r *rig) drain(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	done := make(chan tea.Msg, 1)
	go func() { done <- cmd() }()
	var msg tea.Msg
	select {
	case msg = <-done:
	case <-time.After(timerWait):
		return
	}
	switch msg := msg.(type) {
	case nil:
	case tea.BatchMsg:
		// concurrently, so the timers of a batch cost one wait
		var wg sync.WaitGroup
		results := make([]tea.Msg, len(msg))
		for i, c := range msg {
			if c == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch := make(chan tea.Msg, 1)
				go func() { ch <- c() }()
				select {
				case results[i] = <-ch:
				case <-time.After(timerWait):
				}
			}()
		}
		wg.Wait()
		for _, m := range results {
			if m != nil {
				r.deliver(m)
			}
		}
	default:
		r.deliver(msg)
	}
}

func (r *rig) deliver(msg tea.Msg) {
	if b, ok := msg.(tea.BatchMsg); ok {
		for _, c := range b {
			r.drain(c)
		}
		return
	}
	_, next := r.m.Update(msg)
	r.drain(next)
}

func (r *rig) press(keys ...string) {
	for _, k := range tuitest.Keys(keys...) {
		_, cmd := r.m.Update(k)
		r.drain(cmd)
	}
}

func (r *rig) typeText(s string) {
	for _, c := range s {
		r.press(string(c))
	}
}

// capture is one screen of the tour: its golden name, what leads to it
// from the previous one, and text it must show.
type capture struct {
	name  string
	keys  func(r *rig)
	wants []string
}

func tour() []capture {
	keys := func(k ...string) func(r *rig) { return func(r *rig) { r.press(k...) } }
	return []capture{
		{"01-status-logged-out", func(*rig) {}, []string{"not logged in", "esx-lab-01", "https://192.168.10.5:8443/", "F2/l log in"}},
		{"02-login", func(r *rig) { r.press("l"); r.typeText("alice"); r.press("tab"); r.typeText("s3cret") },
			[]string{"Log in to manage this host", "alice", "******", "enter log in"}},
		{"03-status", keys("enter"), []string{"alice@tty1 [RW]", "[s Status]", "logged in as alice", "DIRECTOR  connected to director.example.org:9443"}},
		{"04-vms", keys("v"), []string{"[v VMs]", "web-01", "db-01", "build", "legacy-win", "EXTERNAL", "CLI: virt vm stop web-01"}},
		{"05-vm-menu", keys("enter"), []string{"Start", "Force stop", "Delete", "Console", "CLI: virt vm stop web-01"}},
		{"06-vm-delete", keys("esc", "j", "j", "D"), []string{"Delete VM build?", "Press y to delete build; any other key cancels.", "y delete", "CLI: virt vm delete build"}},
		{"07-network", keys("esc", "n"), []string{"[n Network]", "192.168.10.5/24", "192.168.10.1", "br0", "CLI: virt net show"}},
		{"08-network-edit", keys("e"), []string{"Management interface", "Interface", "Gateway", "CLI: virt net apply"}},
		{"09-hardware", keys("esc", "w"), []string{"[w Hardware]", "Summary", "esx-lab-01", "CLI: virt host info"}},
		{"10-logs", keys("g"), []string{"[g Logs]", "auth.log", "dcui.log", "web-01", "CLI: less"}},
		{"11-diagnostics", keys("d", "enter"), []string{"[d Diag]", "SUPPORT BUNDLE", "virtcon-diagnostics-20260314T092653Z.tar.gz", "CLI: cd /var/lib/virtcon/diagnostics && virt diagnostics"}},
		{"12-director", keys("m"), []string{"[m Director]", "enrolled with director.example.org:9443", "[PASS] connected", "CLI: virt agent status"}},
		{"13-power", keys("p"), []string{"[p Power]", "Reboot", "Power off", "3 VMs are running", "CLI: virt host reboot"}},
		{"14-power-confirm", keys("b"), []string{"Reboot the host?", "web-01", "db-01", "Press y to reboot now; any other key cancels."}},
		{"15-help", keys("esc", "h"), []string{"Power keys", "Global keys", "F4/v", "m", "director", "reboot host"}},
		{"16-locked", keys("esc", "l"), []string{"Console locked", "alice", "F2/l", "not logged in"}},
	}
}

// TestScreens tours every screen in the frame, rich and plain: each
// capture is a golden of exactly 80x24, ASCII only in the plain tier.
func TestScreens(t *testing.T) {
	for _, tier := range tuitest.GoldenTiers {
		t.Run(tier.String(), func(t *testing.T) {
			r := newRig(t, tier)
			for _, c := range tour() {
				c.keys(r)
				out := r.m.Render()
				t.Run(c.name, func(t *testing.T) {
					text := ansi.Strip(out)
					for _, w := range c.wants {
						if !strings.Contains(text, w) {
							t.Errorf("screen lacks %q:\n%s", w, text)
						}
					}
					tuitest.RequireGolden(t, tier, out, 80, 24)
				})
			}
			if len(r.vms.calls) != 0 || r.power.reboots+r.power.poweroffs != 0 {
				t.Errorf("the tour changed the host: vm calls %v, reboots %d, power offs %d", r.vms.calls, r.power.reboots, r.power.poweroffs)
			}
			if r.released != 1 {
				t.Errorf("console lock released %d times; want 1 (at the lock)", r.released)
			}
		})
	}
}

// TestBottomLinesFit: the message, the CLI line and both key legends fit
// the frame's 76 columns on every screen of the tour, so no key and no
// part of a command is cut off (the app would end it with "~").
func TestBottomLinesFit(t *testing.T) {
	r := newRig(t, term.Plain)
	for _, c := range tour() {
		c.keys(r)
		lines := strings.Split(ansi.Strip(r.m.Render()), "\n")
		// border, header, tabs, 16 content rows, then these four
		for _, l := range lines[19:23] {
			if strings.HasSuffix(l, "~|") {
				t.Errorf("%s: a bottom line is cut off: %q", c.name, l)
			}
		}
	}
}

// TestPageKeysAvoidReserved: on every page, as it opens (nothing
// focused), the keys its legend shows are none of the global letters, so
// they reach the page instead of switching to another.
func TestPageKeysAvoidReserved(t *testing.T) {
	r := newRig(t, term.Plain)
	r.press("l")
	r.typeText("alice")
	r.press("tab")
	r.typeText("s3cret")
	r.press("enter")
	for _, p := range r.pages {
		r.press(p.Key.Keys()[len(p.Key.Keys())-1]) // the letter
		if p.Screen.Capturing() {
			t.Errorf("%s captures keys as it opens", p.Tab)
		}
		for _, b := range p.Screen.ShortHelp() {
			for _, k := range b.Keys() {
				if len(k) == 1 && strings.Contains(keys.Reserved, k) {
					t.Errorf("%s: legend key %q (%s) is a global letter", p.Tab, k, b.Help().Desc)
				}
			}
		}
	}
}

// TestScreenKeysAvoidGlobalKeys walks every screen's whole key map (its
// help, with the keys of its menus, forms and dialogs, and its legend)
// against every global key. A screen key that is also a global one either
// shadows it (a menu or dialog captures keys, so x there would never log
// out) or is dead (on the list the app takes it first).
func TestScreenKeysAvoidGlobalKeys(t *testing.T) {
	r := newRig(t, term.Plain)
	global := map[string]string{}
	for _, b := range keys.Default().All() {
		for _, k := range b.Keys() {
			global[k] = b.Help().Desc
		}
	}
	for _, k := range keys.Reserved {
		if _, ok := global[string(k)]; !ok {
			t.Errorf("reserved letter %q is in no global binding", k)
		}
	}
	for _, p := range r.pages {
		cols := append(p.Screen.FullHelp(), p.Screen.ShortHelp())
		for _, col := range cols {
			for _, b := range col {
				for _, k := range b.Keys() {
					if g, ok := global[k]; ok {
						t.Errorf("%s: key %q (%s) is the global key of %q", p.Tab, k, b.Help().Desc, g)
					}
				}
			}
		}
	}
}

// TestQuitAsksWhileTrialPending: the status screen's reading of a network
// change on trial reaches the app, which asks before F10 quits.
func TestQuitAsksWhileTrialPending(t *testing.T) {
	src := statusSources()
	src.PendingTry = func() (*netcfg.Pending, error) {
		return &netcfg.Pending{ID: "t1", Started: fixedNow.Add(-78 * time.Second), Deadline: fixedNow.Add(102 * time.Second)}, nil
	}
	r := newRigWith(t, term.Plain, src)
	_, cmd := r.m.Update(tuitest.Key("f10"))
	if cmd != nil {
		if _, ok := cmd().(tea.QuitMsg); ok {
			t.Fatal("F10 quit at once with a network change on trial")
		}
	}
	text := ansi.Strip(r.m.Render())
	for _, w := range []string{"A network change is on trial and rolls back in 1:42 unless kept.", "Quit anyway? y/N"} {
		if !strings.Contains(text, w) {
			t.Errorf("screen lacks %q:\n%s", w, text)
		}
	}
	_, cmd = r.m.Update(tuitest.Key("y"))
	if cmd == nil {
		t.Fatal("y returned no command")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("y did not quit")
	}
}

// TestProgramPlainASCII runs the same tour through a real Bubble Tea
// program (teatest) with the ASCII colour profile: every byte written to
// the terminal is printable ASCII or an escape sequence's own.
func TestProgramPlainASCII(t *testing.T) {
	r := newRig(t, term.Plain)
	tm := teatest.NewTestModel(t, r.m, teatest.WithInitialTermSize(80, 24),
		teatest.WithProgramOptions(tea.WithColorProfile(colorprofile.Ascii)))
	// WaitFor consumes the output it reads: keep it for the byte check
	var seen []byte
	waitFor := func(what string) {
		t.Helper()
		var got []byte
		teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
			got = b
			return bytes.Contains(b, []byte(what))
		}, teatest.WithDuration(5*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
		seen = append(seen, got...)
	}
	send := func(keys ...string) {
		for _, k := range tuitest.Keys(keys...) {
			tm.Send(k)
		}
	}
	waitFor("192.168.10.5")
	send("l")
	for _, c := range "alice" {
		send(string(c))
	}
	send("tab")
	for _, c := range "s3cret" {
		send(string(c))
	}
	send("enter")
	waitFor("alice@tty1")
	for _, step := range []struct{ keys, want string }{
		{"v", "legacy-win"}, {"n", "MANAGEMENT"}, {"w", "PCI & IOMMU"}, {"g", "dcui.log"},
		{"d", "SUPPORT BUNDLE"}, {"m", "AGENT"}, {"p", "HOST POWER"},
	} {
		send(step.keys)
		waitFor(step.want)
	}
	send("q")
	raw, err := io.ReadAll(tm.FinalOutput(t, teatest.WithFinalTimeout(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	tuitest.RequireASCII(t, string(append(seen, raw...)))
}
