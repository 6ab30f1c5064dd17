package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
	"github.com/virtcon/virtcon/vm"
	"github.com/virtcon/virtcon/webterm"
)

var fixedNow = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func fakeSources() Sources {
	inv := fakehost.Inventory()
	rep := &hostinfo.Report{
		Acceleration: hostinfo.AccelKVM, AccelerationReason: "KVM usable",
		Checks: []hostinfo.Check{
			{ID: "kvm.api", Status: hostinfo.Pass, Detail: "KVM API 12"},
			{ID: "hugepages", Status: hostinfo.Unknown, Detail: "no hugepages reserved"},
			{ID: "iommu.kernel", Status: hostinfo.Warn, Detail: "IOMMU off on the kernel command line", Hint: "add intel_iommu=on to the kernel command line and reboot"},
		},
	}
	return Sources{
		Host: func(context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) { return inv, rep, nil },
		VMs: func(context.Context) ([]vm.Entry, error) {
			return []vm.Entry{
				{Name: "web-01", Phase: vm.PhaseRunning}, {Name: "web-02", Phase: vm.PhaseRunning},
				{Name: "db-01", Phase: vm.PhaseRunning}, {Name: "build", Phase: vm.PhaseStopped},
				{Name: "old", Phase: vm.PhasePaused},
			}, nil
		},
		PendingTry: func() (*netcfg.Pending, error) {
			return &netcfg.Pending{ID: "t1", Started: fixedNow.Add(-18 * time.Second), Deadline: fixedNow.Add(42 * time.Second)}, nil
		},
		Addresses: func() ([]Addr, error) {
			return []Addr{
				{Iface: "eno1", Prefix: netip.MustParsePrefix("192.168.10.5/24")},
				{Iface: "eno1", Prefix: netip.MustParsePrefix("2001:db8::5/64")},
			}, nil
		},
		WebTerminal: func() (*webterm.Record, error) { return fakeWebTerminal(), nil },
		Usage:       fakeUsage(),
		Boot:        func() (*host.BootRecord, bool, error) { return fakeBoot(), true, nil },
		Director:    func() (*Director, error) { return fakeDirector(), nil },
	}
}

// fakeBoot is a boot that brought the network up and started its three
// autostart VMs.
func fakeBoot() *host.BootRecord {
	at := fixedNow.Add(-14 * time.Minute)
	return &host.BootRecord{Time: at, Finished: at.Add(9 * time.Second), BootID: "b1", FirstOfBoot: true, Policy: host.DefaultPolicy(),
		Network: host.BootNetwork{Result: host.NetApplied, Steps: []string{"create bridge br0", "enslave eno2 to bridge br0", "bring br0 up", "restore nat network default (bridge vcnat0, nftables chains, dnsmasq)"}},
		VMs: []host.BootVM{
			{Name: "db-01", Why: host.WhyAutostart, Outcome: host.BootStarted},
			{Name: "web-01", Why: host.WhyAutostart, Order: 1, Outcome: host.BootStarted},
			{Name: "web-02", Why: host.WhyAutostart, Order: 1, Outcome: host.BootStarted},
		}}
}

// cpuSeries is the busy share of each second the fake usage reports, and
// memory use climbs from 40% by 1 point a second, so goldens are stable.
var cpuSeries = []uint64{5, 12, 30, 55, 80, 95, 60, 40, 20, 10, 3, 0, 100, 70, 45, 25, 15, 8, 50, 33}

// fakeUsage returns a Usage source that walks cpuSeries, one step a call.
func fakeUsage() func() (hostinfo.Usage, error) {
	var u hostinfo.Usage
	u.MemTotalBytes = 100 << 20
	i := 0
	return func() (hostinfo.Usage, error) {
		if i > 0 {
			u.CPUBusy += cpuSeries[(i-1)%len(cpuSeries)]
			u.CPUTotal += 100
		}
		u.MemAvailableBytes = u.MemTotalBytes - uint64(40+i)<<20
		i++
		return u, nil
	}
}

// feedUsage takes n more samples through the screen's own Cmd, as the
// tick would.
func feedUsage(t *testing.T, m *Model, n int) {
	t.Helper()
	for range n {
		cmd := m.sampleUsage()
		if cmd == nil {
			t.Fatal("sampleUsage returned no Cmd")
		}
		m.Update(cmd())
	}
}

func newModel(t *testing.T, tier term.Tier, src Sources) *Model {
	c := common.New(context.Background(), tier, testutil.Logger(t))
	c.Now = func() time.Time { return fixedNow }
	return New(c, src, Options{Product: "virtcon", Version: "0.4.0"})
}

// untilLoaded quits the program once every source has answered, so the
// golden frame is the loaded screen without timing guesses.
type untilLoaded struct{ *Model }

func (u untilLoaded) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	_, cmd := u.Model.Update(msg)
	if u.Loaded() {
		return u, tea.Quit
	}
	return u, cmd
}

func runLoaded(t *testing.T, tier term.Tier) *Model {
	t.Helper()
	prof := colorprofile.TrueColor
	if tier == term.Plain {
		prof = colorprofile.Ascii
	}
	tm := teatest.NewTestModel(t, untilLoaded{newModel(t, tier, fakeSources())},
		teatest.WithInitialTermSize(80, 24),
		teatest.WithProgramOptions(tea.WithColorProfile(prof)))
	fm := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second))
	return fm.(untilLoaded).Model
}

func TestGoldenRich(t *testing.T) {
	m := runLoaded(t, term.Rich)
	feedUsage(t, m, len(cpuSeries))
	tuitest.RequireGolden(t, term.Rich, m.Render(), 80, 24)
}

func TestGoldenPlain(t *testing.T) {
	m := runLoaded(t, term.Plain)
	feedUsage(t, m, len(cpuSeries))
	out := m.Render()
	tuitest.RequireGolden(t, term.Plain, out, 80, 24)
	text := ansi.Strip(out)
	for _, want := range []string{"esx-lab-01", "https://192.168.10.5:8443/", "[WARN] iommu.kernel", "3 running", "0:42", "F2/l log in", "Load", "CPU", "33%", "Mem", "60%"} {
		if !strings.Contains(text, want) {
			t.Errorf("plain screen lacks %q", want)
		}
	}
}

func TestPlainOutputIsASCII(t *testing.T) {
	m := newModel(t, term.Plain, fakeSources())
	tm := teatest.NewTestModel(t, untilLoaded{m}, teatest.WithInitialTermSize(80, 24),
		teatest.WithProgramOptions(tea.WithColorProfile(colorprofile.Ascii)))
	raw, err := io.ReadAll(tm.FinalOutput(t, teatest.WithFinalTimeout(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	feedUsage(t, m, 30)
	screens := map[string][]byte{"view": []byte(m.Render()), "terminal output": raw}
	m.showHelp = true
	screens["help view"] = []byte(m.Render())
	for name, b := range screens {
		t.Run(name, func(t *testing.T) { tuitest.RequireASCII(t, string(b)) })
	}
}

func TestZeroSizeRenders80x24(t *testing.T) {
	for _, tier := range []term.Tier{term.Rich, term.Linux, term.Plain} {
		m := newModel(t, tier, fakeSources())
		m.Update(tea.WindowSizeMsg{Width: 0, Height: 0})
		tuitest.CheckSize(t, m.Render(), 80, 24)
	}
}

func TestFixedSizeIgnoresTerminal(t *testing.T) {
	m := newModel(t, term.Plain, fakeSources())
	m.opts.FixedSize = true
	m.SetSize(100, 30)
	m.Update(tea.WindowSizeMsg{Width: 0, Height: 0})
	tuitest.CheckSize(t, m.Render(), 100, 30)
}

// TestUpdateNeverBlocks: with a collector that takes 2s, a key is still
// answered at once, both by Update and by the running program.
func TestUpdateNeverBlocks(t *testing.T) {
	src := fakeSources()
	slow := func(ctx context.Context) ([]vm.Entry, error) {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
		return nil, errors.New("slow")
	}
	src.VMs = slow
	src.Host = func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		_, err := slow(ctx)
		return nil, nil, err
	}

	m := newModel(t, term.Rich, src)
	start := time.Now()
	_ = m.Init() // returns commands; running them is the program's job
	m.Update(tuitest.Key("r"))
	m.Update(tuitest.Key("h"))
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("Init+Update took %v with a slow collector; want well under 100ms", d)
	}
	if !m.showHelp {
		t.Errorf("help key did not toggle help")
	}

	tm := teatest.NewTestModel(t, newModel(t, term.Rich, src), teatest.WithInitialTermSize(80, 24))
	time.Sleep(50 * time.Millisecond) // the slow loads are in flight
	start = time.Now()
	tm.Send(tuitest.Key("q"))
	tm.WaitFinished(t, teatest.WithFinalTimeout(time.Second))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("quit took %v while a collector was busy; want under 500ms", d)
	}
}

func TestWorst(t *testing.T) {
	r := &hostinfo.Report{Checks: []hostinfo.Check{
		{ID: "a", Status: hostinfo.Pass}, {ID: "b", Status: hostinfo.Unknown},
		{ID: "c", Status: hostinfo.Fail}, {ID: "d", Status: hostinfo.Warn}, {ID: "e", Status: hostinfo.Fail},
	}}
	if c, ok := Worst(r); !ok || c.ID != "c" {
		t.Errorf("Worst = %q, %v; want c, true", c.ID, ok)
	}
	if _, ok := Worst(&hostinfo.Report{Checks: []hostinfo.Check{{ID: "a", Status: hostinfo.Pass}}}); ok {
		t.Errorf("Worst of all-pass = true; want false")
	}
}

func TestRing(t *testing.T) {
	r := newRing(3)
	if _, ok := r.last(); ok {
		t.Error("last of an empty ring: ok; want !ok")
	}
	for _, v := range []float64{1, 2, 3, 4, 5} {
		r.push(v)
	}
	if got := fmt.Sprint(r.values()); got != "[3 4 5]" {
		t.Errorf("values after 5 pushes into 3 = %s; want [3 4 5]", got)
	}
	if v, _ := r.last(); v != 5 {
		t.Errorf("last = %v; want 5", v)
	}
	r.resize(2)
	if got := fmt.Sprint(r.values()); got != "[4 5]" {
		t.Errorf("values after shrinking to 2 = %s; want [4 5]", got)
	}
	r.resize(4)
	r.push(6)
	if got := fmt.Sprint(r.values()); got != "[4 5 6]" {
		t.Errorf("values after growing to 4 and a push = %s; want [4 5 6]", got)
	}
}

func TestSparkline(t *testing.T) {
	tests := []struct {
		vals  []float64
		width int
		tier  term.Tier
		want  string
	}{
		{[]float64{0, 12.5, 25, 37.5, 50, 62.5, 75, 100}, 8, term.Rich, "▁▂▃▄▅▆▇█"},
		{[]float64{0, 12.5, 25, 37.5, 50, 62.5, 75, 100}, 8, term.Plain, "_.-=+*#@"},
		{[]float64{0, 12.5, 25, 37.5, 50, 62.5, 75, 100}, 8, term.Linux, "_.-=+*#@"},
		{[]float64{100, 0}, 5, term.Plain, "   @_"},
		{[]float64{-5, 50, 150}, 2, term.Plain, "+@"},
		{nil, 3, term.Rich, "   "},
	}
	for _, tc := range tests {
		if got := sparkline(tc.vals, tc.width, tc.tier); got != tc.want {
			t.Errorf("sparkline(%v, %d, %v) = %q; want %q", tc.vals, tc.width, tc.tier, got, tc.want)
		}
	}
}

// TestLoadLine: the first sample gives memory only (CPU needs two), an
// error is shown with its text, and a later good sample clears it.
func TestLoadLine(t *testing.T) {
	src := fakeSources()
	fail := false
	good := src.Usage
	src.Usage = func() (hostinfo.Usage, error) {
		if fail {
			return hostinfo.Usage{}, errors.New("/proc/stat: no aggregate cpu line")
		}
		return good()
	}
	m := newModel(t, term.Plain, src)
	if got := ansi.Strip(m.loadLine(sparkWidth(80))); !strings.Contains(got, "loading") {
		t.Errorf("before a sample: %q; want loading", got)
	}
	feedUsage(t, m, 1)
	if got := ansi.Strip(m.loadLine(sparkWidth(80))); !strings.Contains(got, "CPU") || !strings.Contains(got, "   --") || !strings.Contains(got, " 40%") {
		t.Errorf("after one sample: %q; want CPU -- and Mem 40%%", got)
	}
	feedUsage(t, m, 1)
	if got := ansi.Strip(m.loadLine(sparkWidth(80))); !strings.Contains(got, "_   5%") {
		t.Errorf("after two samples: %q; want a 5%% CPU bar", got)
	}
	fail = true
	feedUsage(t, m, 1)
	if got := ansi.Strip(m.loadLine(sparkWidth(80))); !strings.Contains(got, "[????] unavailable: /proc/stat: no aggregate cpu line") {
		t.Errorf("after an error: %q; want the error", got)
	}
	fail = false
	feedUsage(t, m, 1)
	if got := ansi.Strip(m.loadLine(sparkWidth(80))); strings.Contains(got, "unavailable") {
		t.Errorf("after recovery: %q; want the sparklines back", got)
	}
	if m.usageBusy {
		t.Error("usageBusy still set after the result arrived")
	}
	if cmd := m.sampleUsage(); cmd == nil || m.sampleUsage() != nil {
		t.Error("a second sample was started while one is in flight")
	}
}

// TestTickSamples: every tick asks for a sample.
func TestTickSamples(t *testing.T) {
	n := 0
	src := fakeSources()
	src.Usage = func() (hostinfo.Usage, error) { n++; return hostinfo.Usage{}, nil }
	m := newModel(t, term.Plain, src)
	_, cmd := m.Update(tickMsg{})
	if !m.usageBusy || cmd == nil {
		t.Fatal("tick did not start a usage sample")
	}
}

// TestFullestScreenFits: with the most lines every section can take (more
// addresses than shown, a hint under the worst check), the load line and
// the last line (NETWORK) still fit in 80x24.
func TestFullestScreenFits(t *testing.T) {
	src := fakeSources()
	src.Addresses = func() ([]Addr, error) {
		var out []Addr
		for i := range 5 {
			out = append(out, Addr{Iface: "eno1", Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, 10, byte(5 + i)}), 24)})
		}
		return out, nil
	}
	m := newModel(t, term.Plain, src)
	for _, cmd := range []tea.Cmd{m.loadHost(), m.loadVMs(), m.loadNet()} {
		m.Update(cmd())
	}
	feedUsage(t, m, 3)
	out := m.Render()
	tuitest.CheckSize(t, out, 80, 24)
	text := ansi.Strip(out)
	for _, want := range []string{"3 more addresses", "hint: add intel_iommu=on", "Load     CPU", "NETWORK", "F1/h help"} {
		if !strings.Contains(text, want) {
			t.Errorf("screen lacks %q:\n%s", want, text)
		}
	}
}

// TestContent is the body the app shows inside its own frame at 80x24
// (76x16): every section is there, the blank lines go first.
func TestContent(t *testing.T) {
	for _, tier := range []term.Tier{term.Rich, term.Plain} {
		t.Run(tier.String(), func(t *testing.T) {
			m := runLoaded(t, tier)
			feedUsage(t, m, len(cpuSeries))
			out := m.Content(76, 16)
			tuitest.CheckSize(t, out, 76, 16)
			teatest.RequireEqualOutput(t, []byte(out))
			text := ansi.Strip(out)
			for _, want := range []string{"MANAGEMENT", "https://192.168.10.5:8443/", "HOST", "Load     CPU", "33%", "60%",
				"HEALTH", "hint: add intel_iommu=on", "VMS", "3 running", "NETWORK", "0:42", "DIRECTOR  connected to"} {
				if !strings.Contains(text, want) {
					t.Errorf("content lacks %q:\n%s", want, text)
				}
			}
			if tier == term.Plain {
				tuitest.RequireASCII(t, out)
			}
			if m.Hostname() != "esx-lab-01" {
				t.Errorf("Hostname = %q; want esx-lab-01", m.Hostname())
			}
		})
	}
	// with room to spare the blank lines stay
	m := runLoaded(t, term.Plain)
	if lines := strings.Split(m.Content(76, 30), "\n"); strings.TrimSpace(lines[4]) != "" {
		t.Errorf("line 5 of a tall content area is %q; want the blank after MANAGEMENT", lines[4])
	}
	if newModel(t, term.Plain, fakeSources()).Hostname() != "" {
		t.Error("Hostname before the load is not empty")
	}
}

// TestContentOverfull: three addresses (one link-local), a hint that wraps
// to three lines: VMS and NETWORK stay on screen at 76x16, the link-local
// address gives way to the routable ones, and the cut hint is marked.
func TestContentOverfull(t *testing.T) {
	src := fakeSources()
	src.Addresses = func() ([]Addr, error) {
		return []Addr{
			{Iface: "eth0", Prefix: netip.MustParsePrefix("192.0.2.2/24")},
			{Iface: "eth0", Prefix: netip.MustParsePrefix("fd00::2/64")},
			{Iface: "eth0", Prefix: netip.MustParsePrefix("fe80::fc:ff:fe00:1/64")},
		}, nil
	}
	host := src.Host
	src.Host = func(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		inv, rep, err := host(ctx)
		r := *rep
		r.Checks = append([]hostinfo.Check{{ID: "cpu.virt-flags", Status: hostinfo.Fail,
			Detail: "no vmx or svm flag: the CPU offers no hardware virtualisation",
			Hint:   "this machine is itself a VM: enable nested virtualisation on the outer host; until then guests run under TCG (software emulation)"}},
			r.Checks...)
		return inv, &r, err
	}
	m := newModel(t, term.Plain, src)
	for _, cmd := range []tea.Cmd{m.loadHost(), m.loadVMs(), m.loadNet()} {
		m.Update(cmd())
	}
	text := ansi.Strip(m.Content(76, 16))
	cut := false
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimRight(l, " "); strings.HasPrefix(strings.TrimLeft(l, " "), "hint:") || strings.HasPrefix(l, hang) {
			cut = cut || strings.HasSuffix(l, " ~")
		}
	}
	if !cut {
		t.Errorf("the shortened hint is not marked with ' ~':\n%s", text)
	}
	for _, want := range []string{"192.0.2.2/24", "fd00::2/64", "hint: this machine", "VMS", "NETWORK"} {
		if !strings.Contains(text, want) {
			t.Errorf("content lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "fe80::") {
		t.Errorf("link-local address listed next to routable ones:\n%s", text)
	}
}

// The network load rolls back an expired change on trial whose watchdog
// is gone (ResolveExpiredTry) and says so on the NETWORK line, until a
// new change is on trial; a failed rollback is not shown as done.
func TestExpiredTryRolledBack(t *testing.T) {
	at := fixedNow.Add(-3 * time.Second)
	tests := []struct {
		name     string
		resolved *netcfg.ResolvedTry
		err      error
		pending  *netcfg.Pending
		want     []string
		not      []string
	}{
		{"rolled back", &netcfg.ResolvedTry{ID: "t1", At: at, Why: "its watchdog (pid 4242) has exited"}, nil, nil,
			[]string{"expired change on trial rolled back at " + at.Local().Format(time.TimeOnly), "its watchdog (pid 4242) has exited"}, []string{"no change on trial"}},
		{"rollback failed", &netcfg.ResolvedTry{ID: "t1", Why: "its watchdog (pid 4242) has exited"}, errors.New("restore: boom"),
			&netcfg.Pending{ID: "t1", Deadline: fixedNow.Add(-time.Second), RollbackError: "restore: boom"},
			[]string{"rollback failed, retry: virt net rollback: restore: boom"}, []string{"rolled back at"}},
		{"deadline passed, watchdog at work", nil, nil, &netcfg.Pending{ID: "t1", Deadline: fixedNow.Add(-time.Second)},
			[]string{"deadline passed, rolling back"}, []string{"rollback in"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fakeSources()
			calls := 0
			src.ResolveExpiredTry = func(context.Context) (*netcfg.ResolvedTry, error) { calls++; return tt.resolved, tt.err }
			src.PendingTry = func() (*netcfg.Pending, error) { return tt.pending, nil }
			m := newModel(t, term.Plain, src)
			m.Update(m.loadNet()())
			if calls != 1 {
				t.Fatalf("ResolveExpiredTry called %d times by a network load; want 1", calls)
			}
			line := m.tryLine(fixedNow)
			for _, w := range tt.want {
				if !strings.Contains(line, w) {
					t.Errorf("NETWORK line %q; want %q", line, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(line, n) {
					t.Errorf("NETWORK line %q; want no %q", line, n)
				}
			}
		})
	}

	// The line stays after later loads find nothing, and goes once a new
	// change is on trial.
	src := fakeSources()
	resolved := &netcfg.ResolvedTry{ID: "t1", At: at, Why: "it has no watchdog"}
	var pending *netcfg.Pending
	src.ResolveExpiredTry = func(context.Context) (*netcfg.ResolvedTry, error) { r := resolved; resolved = nil; return r, nil }
	src.PendingTry = func() (*netcfg.Pending, error) { return pending, nil }
	m := newModel(t, term.Plain, src)
	m.Update(m.loadNet()())
	m.Update(m.loadNet()())
	if line := m.tryLine(fixedNow); !strings.Contains(line, "rolled back") {
		t.Errorf("second load: %q; want the rollback still told", line)
	}
	pending = &netcfg.Pending{ID: "t2", Deadline: fixedNow.Add(time.Minute)}
	m.Update(m.loadNet()())
	if line := m.tryLine(fixedNow); !strings.Contains(line, "rollback in 1:00") {
		t.Errorf("with a new try: %q; want it shown", line)
	}
	pending = nil
	m.Update(m.loadNet()())
	if line := m.tryLine(fixedNow); line != "no change on trial" {
		t.Errorf("after the new try ended: %q; want no change on trial", line)
	}
}

// Another process at the network try (ErrTryBusy) is "not now": no error
// on the screen, the change on trial shown as it is, looked at again by
// the next load.
func TestExpiredTryBusy(t *testing.T) {
	src := fakeSources()
	src.Addresses = func() ([]Addr, error) { return nil, nil }
	src.ResolveExpiredTry = func(context.Context) (*netcfg.ResolvedTry, error) {
		return nil, fmt.Errorf("resolve an expired network try: %w", netcfg.ErrTryBusy)
	}
	src.PendingTry = func() (*netcfg.Pending, error) {
		return &netcfg.Pending{ID: "t1", Deadline: fixedNow.Add(-time.Second)}, nil
	}
	m := newModel(t, term.Plain, src)
	m.Update(m.loadNet()())
	text := ansi.Strip(m.Content(76, 40))
	if m.netErr != nil || strings.Contains(text, "busy") || strings.Contains(text, "unavailable") {
		t.Errorf("netErr %v; want none for a busy try:\n%s", m.netErr, text)
	}
	if line := m.tryLine(fixedNow); !strings.Contains(line, "deadline passed, rolling back") {
		t.Errorf("NETWORK line %q; want the pending try as it is", line)
	}
}

// A `virt net rollback` that hangs holding the try's lock must not hold
// up the screen's network loads: the live source gives up within
// resolveTimeout, and the load shows the addresses and the try.
func TestNetworkLoadNotHeldByTryLock(t *testing.T) {
	layout := paths.New(t.TempDir())
	root, err := filepath.Abs(layout.Root)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(-time.Second)
	rec := fmt.Sprintf(`{"id":"0123456789abcdef","started":%q,"deadline":%q,"root":%q,"snapshot":{}}`,
		deadline.Add(-time.Minute).Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano), root)
	if err := os.MkdirAll(layout.NetworkDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(netcfg.PendingPath(layout), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	// the lock netcfg serialises the try with, held as a hung rollback would
	held, err := flock.Acquire(context.Background(), filepath.Join(filepath.Dir(netcfg.PendingPath(layout)), "pending.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	live := LiveSources(host.New(host.Options{Layout: layout, HostRoot: t.TempDir(), Logger: testutil.Logger(t)}))
	src := fakeSources()
	src.ResolveExpiredTry, src.PendingTry = live.ResolveExpiredTry, live.PendingTry
	m := newModel(t, term.Plain, src)
	done := make(chan tea.Msg, 1)
	start := time.Now()
	go func() { done <- m.loadNet()() }()
	select {
	case msg := <-done:
		m.Update(msg)
	case <-time.After(resolveTimeout + 3*time.Second):
		t.Fatalf("the network load still waits for the try's lock after %v", time.Since(start).Round(time.Second))
	}
	if took := time.Since(start); took > resolveTimeout+time.Second {
		t.Errorf("the network load took %v; want at most about %v", took, resolveTimeout)
	}
	text := ansi.Strip(m.Content(76, 40))
	if m.netErr != nil || !strings.Contains(text, "192.168.10.5/24") {
		t.Errorf("netErr %v; want the addresses and no error:\n%s", m.netErr, text)
	}
	if line := m.tryLine(time.Now()); !strings.Contains(line, "deadline passed, rolling back") {
		t.Errorf("NETWORK line %q; want the pending try", line)
	}
	if _, err := netcfg.PendingTry(layout); err != nil {
		t.Errorf("pending try: %v; want it left to the lock's holder", err)
	}
}

// vm.Manager.List gives the rows it has with an error when a spec cannot
// be read (an UNREADABLE row): the VMS line keeps the counts and says how
// many are unreadable, first; only a list with no rows is "unavailable".
func TestVMLine(t *testing.T) {
	specErr := &vm.SpecError{UID: "3f2a9c07-8b7d-4e1a-9c3b-2d5e6f7a8b9c", Path: "/var/lib/virtcon/vms/3f2a9c07-8b7d-4e1a-9c3b-2d5e6f7a8b9c/vm.yaml", Err: errors.New("spec cut short")}
	unreadable := vm.Entry{UID: specErr.UID, Class: vm.ClassUnreadable, Phase: vm.PhaseUnknown, Message: "spec unreadable: " + specErr.Error()}
	running := vm.Entry{Name: "web-01", Class: vm.ClassManaged, Phase: vm.PhaseRunning}
	stopped := vm.Entry{Name: "web-02", Class: vm.ClassManaged, Phase: vm.PhaseStopped}
	tests := []struct {
		name    string
		vms     []vm.Entry
		err     error
		want    string
		without []string
	}{
		{"all readable", []vm.Entry{running, stopped}, nil, "1 running, 1 stopped (2 total)", []string{"[FAIL]", "unreadable"}},
		{"one unreadable", []vm.Entry{running, unreadable, stopped}, specErr,
			"[FAIL] 1 VM unreadable (see VMs); 1 running, 1 stopped (3 total)", []string{"unavailable", "unknown"}},
		{"two unreadable", []vm.Entry{running, unreadable, unreadable}, errors.Join(specErr, specErr),
			"[FAIL] 2 VMs unreadable (see VMs); 1 running (3 total)", []string{"unavailable"}},
		{"only unreadable", []vm.Entry{unreadable}, specErr, "[FAIL] 1 VM unreadable (see VMs) (1 total)", []string{"unavailable"}},
		{"rows with another error", []vm.Entry{running}, errors.New("scan: boom"), "[WARN] 1 running (1 total); list incomplete: scan: boom", nil},
		{"no rows", nil, errors.New("vm store /var/lib/virtcon/vms: permission denied"), "[????] unavailable: vm store", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fakeSources()
			src.VMs = func(context.Context) ([]vm.Entry, error) { return tt.vms, tt.err }
			m := newModel(t, term.Plain, src)
			m.Update(m.loadVMs()())
			line := ansi.Strip(m.vmLine())
			if !strings.HasPrefix(line, tt.want) {
				t.Errorf("VMS line %q; want %q", line, tt.want)
			}
			for _, w := range tt.without {
				if strings.Contains(line, w) {
					t.Errorf("VMS line %q; want no %q", line, w)
				}
			}
		})
	}
}

// The BOOT line says what the last virt host boot did, problems first
// marked, and whether it ran in this boot at all.
func TestBootLine(t *testing.T) {
	failed := fakeBoot()
	failed.VMs[0].Outcome, failed.VMs[0].Error = host.BootFailed, `vm "db-01": start: spec.network[0]: bridge br1 not found`
	failed.VMs = append(failed.VMs, host.BootVM{Name: "cache", Why: host.WhyRestore, Outcome: host.BootAlreadyRunning})
	refused := fakeBoot()
	refused.PolicyError, refused.Policy, refused.VMs = "/etc/virtcon/host.yaml: invalid host policy: onBoot: must be autostart or restore (got \"always\")", nil, []host.BootVM{}
	netFailed := fakeBoot()
	netFailed.Network = host.BootNetwork{Result: host.NetFailed, Error: "applied network configuration is damaged"}
	none := fakeBoot()
	none.Network, none.VMs = host.BootNetwork{Result: host.NetNone}, nil
	for _, tc := range []struct {
		name     string
		rec      *host.BootRecord
		thisBoot bool
		err      error
		want     string
	}{
		{"started", fakeBoot(), true, nil, "BOOT      09:12: network applied (4 steps), 3 of 3 VMs started"},
		{"a VM failed", failed, true, nil, `BOOT      [FAIL] 09:12: network applied (4 steps), 2 of 3 VMs started (1 running already), 1 failed: db-01: vm "db-01": start: spec.network[0]: bridge br1 not found`},
		{"policy refused", refused, true, nil, "BOOT      [FAIL] 09:12: network applied (4 steps), no VM started: host.yaml refused: /etc/virtcon/host.yaml: invalid host policy: onBoot"},
		{"network failed", netFailed, true, nil, "BOOT      [FAIL] 09:12: NETWORK FAILED: applied network configuration is damaged, 3 of 3 VMs started"},
		{"nothing to do", none, true, nil, "BOOT      09:12: no network configured, no autostart VMs"},
		{"of an earlier boot", fakeBoot(), false, nil, "BOOT      [WARN] virt host boot has not run since the host booted (last: 2026-03-14 09:12)"},
		{"never ran", nil, false, nil, "BOOT      not recorded: virt host boot has not run on this host"},
		{"unreadable", nil, false, errors.New("/var/lib/virtcon/boot.json is damaged: unexpected EOF"), "BOOT      [????] boot record unreadable: /var/lib/virtcon/boot.json is damaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := fakeSources()
			src.Boot = func() (*host.BootRecord, bool, error) { return tc.rec, tc.thisBoot, tc.err }
			m := newModel(t, term.Plain, src)
			m.Update(m.loadNet()())
			text := ansi.Strip(m.Content(300, 40))
			var line string
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, "BOOT") {
					line = strings.TrimRight(l, " ")
				}
			}
			if !strings.HasPrefix(line, tc.want) {
				t.Errorf("boot line\n  %q\nwant it to begin\n  %q", line, tc.want)
			}
		})
	}
}

// The live sources read the record `virt host boot` wrote, of this boot.
func TestLiveBootSource(t *testing.T) {
	layout := paths.New(t.TempDir())
	h := host.New(host.Options{Layout: layout, HostRoot: t.TempDir(), Logger: testutil.Logger(t)})
	live := LiveSources(h)
	if rec, _, err := live.Boot(); rec != nil || err != nil {
		t.Fatalf("before any boot: %+v, %v; want nothing", rec, err)
	}
	want, err := h.Boot(context.Background(), host.BootOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, thisBoot, err := live.Boot()
	if err != nil || rec == nil || !rec.Time.Equal(want.Time) || !thisBoot {
		t.Errorf("after a boot: %+v (this boot %v), %v; want its record", rec, thisBoot, err)
	}
}
