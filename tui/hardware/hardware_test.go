package hardware

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

// The app gives screens 76x17 at an 80x24 terminal.
const width, height = 76, 17

func fakeReport() *hostinfo.Report {
	return &hostinfo.Report{
		Acceleration: hostinfo.AccelKVM, AccelerationReason: "the KVM probe ran guest code at hardware speed",
		Checks: []hostinfo.Check{
			{ID: "cpu.virt-flags", Status: hostinfo.Pass, Detail: "vmx (Intel VT-x)"},
			{ID: "kvm.module", Status: hostinfo.Pass, Detail: "kvm_intel loaded"},
			{ID: "kvm.probe", Status: hostinfo.Pass, Detail: "guest code ran at 3.1e+09 iterations/s"},
			{ID: "iommu.kernel", Status: hostinfo.Warn, Detail: "IOMMU in passthrough mode (iommu=pt)",
				Hint: "fine for VFIO; remove iommu=pt from the kernel command line if host DMA isolation matters more than speed"},
			{ID: "hugepages", Status: hostinfo.Unknown, Detail: "1GiB pool: none reserved"},
			{ID: "dev.vhost-vsock", Status: hostinfo.Fail, Detail: "/dev/vhost-vsock missing",
				Hint: "modprobe vhost_vsock (needed only for host<->guest vsock channels)"},
			{ID: "qemu", Status: hostinfo.Pass, Detail: "QEMU emulator version 7.2.9"},
		},
	}
}

func fakeSources() Sources {
	return Sources{Host: func(context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		return fakehost.FullInventory(), fakeReport(), nil
	}}
}

func newModel(t *testing.T, tier term.Tier, src Sources) *Model {
	c := common.New(context.Background(), tier, testutil.Logger(t))
	c.Now = func() time.Time { return time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC) }
	m := New(c, src)
	m.SetSize(width, height)
	return m
}

// send delivers msg and runs the Cmd it returns, synchronously, feeding
// the result back (the app would do it through the program).
func send(m *Model, msg tea.Msg) {
	_, cmd := m.Update(msg)
	if cmd != nil {
		m.Update(cmd())
	}
}

func press(m *Model, keys ...string) {
	for _, k := range tuitest.Keys(keys...) {
		m.Update(k)
	}
}

func view(m *Model) string { return m.View().Content }

// TestGolden renders each section at 76x17 in the rich and plain tiers.
func TestGolden(t *testing.T) {
	for _, tier := range tuitest.GoldenTiers {
		for _, sec := range []struct {
			name string
			key  string
		}{{"summary", "1"}, {"checks", "2"}, {"pci", "3"}, {"hugepages", "4"}, {"nics", "5"}} {
			t.Run(tier.String()+"_"+sec.name, func(t *testing.T) {
				m := newModel(t, tier, fakeSources())
				send(m, common.ActivateMsg{})
				press(m, sec.key)
				tuitest.RequireGolden(t, tier, view(m), width, height)
			})
		}
	}
}

// TestProgram runs the screen in a real Bubble Tea program: the load
// happens in a Cmd and the page appears.
func TestProgram(t *testing.T) {
	m := newModel(t, term.Plain, fakeSources())
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(width, height),
		teatest.WithProgramOptions(tea.WithColorProfile(colorprofile.Ascii)))
	tm.Send(common.ActivateMsg{})
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
		return strings.Contains(string(b), "esx-lab-01")
	}, teatest.WithDuration(5*time.Second))
	if err := tm.Quit(); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(tm.FinalOutput(t, teatest.WithFinalTimeout(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	tuitest.RequireASCII(t, string(raw))
}

func TestPlainIsASCII(t *testing.T) {
	m := newModel(t, term.Plain, fakeSources())
	send(m, common.ActivateMsg{})
	for _, k := range []string{"1", "2", "3", "4", "5", "end"} {
		press(m, k)
		tuitest.RequireASCII(t, view(m))
	}
	for _, b := range m.ShortHelp() {
		tuitest.RequireASCII(t, b.Help().Key+b.Help().Desc)
	}
	for _, col := range m.FullHelp() {
		for _, b := range col {
			tuitest.RequireASCII(t, b.Help().Key+b.Help().Desc)
		}
	}
	loading := newModel(t, term.Plain, fakeSources())
	tuitest.RequireASCII(t, view(loading))
}

func TestSectionsAndCLI(t *testing.T) {
	m := newModel(t, term.Rich, fakeSources())
	send(m, common.ActivateMsg{})
	tests := []struct {
		keys    []string
		want    Section
		wantCLI string
	}{
		{nil, Summary, "virt host info"},
		{[]string{"tab"}, Checks, "virt host check"},
		{[]string{"tab"}, PCI, "virt host info"},
		{[]string{"shift+tab"}, Checks, "virt host check"},
		{[]string{"5"}, Network, "virt host info"},
		{[]string{"tab"}, Summary, "virt host info"}, // wraps around
		{[]string{"4"}, Hugepages, "virt host info"},
		{[]string{"home"}, Summary, "virt host info"},
		{[]string{"2"}, Checks, "virt host check"},
		{[]string{"up"}, Summary, "virt host info"}, // one line up is the end of Summary
	}
	for i, tc := range tests {
		press(m, tc.keys...)
		if m.Section() != tc.want || m.CLI() != tc.wantCLI {
			t.Errorf("step %d (%v): section %v, CLI %q; want %v, %q", i, tc.keys, m.Section(), m.CLI(), tc.want, tc.wantCLI)
		}
	}
	press(m, "3")
	if first := ansi.Strip(strings.Split(view(m), "\n")[1]); !strings.HasPrefix(first, "PCI & IOMMU") {
		t.Errorf("after 3 the page starts with %q; want the PCI & IOMMU heading", first)
	}
	if tabs := ansi.Strip(strings.Split(view(m), "\n")[0]); !strings.Contains(tabs, "[3 PCI & IOMMU]") {
		t.Errorf("tab line %q does not mark the current section", tabs)
	}
}

func TestScrollKeys(t *testing.T) {
	m := newModel(t, term.Plain, fakeSources())
	send(m, common.ActivateMsg{})
	top := view(m)
	// reserved letters and the viewport's own defaults (d, f, b, u, h, l)
	// must not scroll: the app reads them as navigation
	press(m, "d", "f", "b", "u", "h", "l", "g")
	if view(m) != top {
		t.Error("a letter outside the screen's keys scrolled the page")
	}
	press(m, "down")
	if m.vp.YOffset() != 1 {
		t.Errorf("down: offset %d; want 1", m.vp.YOffset())
	}
	press(m, "j", "k", "k")
	if m.vp.YOffset() != 0 {
		t.Errorf("j k k: offset %d; want 0", m.vp.YOffset())
	}
	press(m, "pgdown")
	if m.vp.YOffset() != m.vp.Height() {
		t.Errorf("pgdown: offset %d; want %d", m.vp.YOffset(), m.vp.Height())
	}
	press(m, "end")
	if !m.vp.AtBottom() || m.Section() != Network {
		t.Errorf("end: at bottom %v, section %v; want true, %v", m.vp.AtBottom(), m.Section(), Network)
	}
	if !strings.Contains(view(m), "removable") {
		t.Error("end does not show the last disk")
	}
	press(m, "pgup", "home")
	if m.vp.YOffset() != 0 {
		t.Errorf("home: offset %d; want 0", m.vp.YOffset())
	}
}

func TestContent(t *testing.T) {
	m := newModel(t, term.Plain, fakeSources())
	send(m, common.ActivateMsg{})
	page := ansi.Strip(strings.Join(m.content(), "\n"))
	for _, want := range []string{
		"Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz (GenuineIntel)",
		"2 sockets, 64 cores, 128 threads",
		"cpus 32-63,96-127, 128.0 GiB memory, 101.0 GiB free",
		"[PASS] acceleration: kvm",
		"[WARN] iommu.kernel: IOMMU in passthrough mode",
		"hint: fine for VFIO",
		"[FAIL] dev.vhost-vsock",
		"[????] hugepages: 1GiB pool",
		"IOMMU group 12  2 devices, passed through together",
		"0000:17:00.0  NVIDIA Corporation GA102GL [A40]  [GPU]",
		"3D controller, driver vfio-pci, NUMA node 0",
		"0000:03:00.0  1a03:2000  [GPU, boot VGA]",
		"2048kB     total 1024, free 1012, reserved 4, surplus 0",
		"node 0   2048kB: total 512, free 500, surplus 0",
		"/dev/hugepages (2048kB pages)",
		"eno1         3c:ec:ef:12:34:56 up      25000Mb/s ice",
		"bridge (virtual)",
		"Samsung PM9A3 (nvme)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// the hint of a passing check is not shown, as in `virt host check`
	if strings.Contains(page, "VGA compatible controller, driver ast, NUMA node -1") {
		t.Error("a NUMA node of -1 (none) is printed")
	}
}

func TestUngroupedDevices(t *testing.T) {
	inv := fakehost.FullInventory()
	for i := range inv.PCI {
		inv.PCI[i].IOMMUGroup = nil
	}
	m := newModel(t, term.Plain, Sources{Host: func(context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		return inv, nil, nil
	}})
	send(m, common.ActivateMsg{})
	page := ansi.Strip(strings.Join(m.content(), "\n"))
	for _, want := range []string{"no IOMMU group  the IOMMU is off", "[????] checks unavailable"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

func TestLoadErrorAndRefresh(t *testing.T) {
	fail := errors.New("host inventory: context deadline exceeded")
	calls := 0
	m := newModel(t, term.Plain, Sources{Host: func(context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		calls++
		if calls == 1 || calls == 3 {
			return nil, nil, fail
		}
		return fakehost.FullInventory(), fakeReport(), nil
	}})
	if !strings.Contains(view(m), "loading") {
		t.Error("before the load the screen does not say loading")
	}
	send(m, common.ActivateMsg{})
	if v := ansi.Strip(view(m)); !strings.Contains(v, "[????] hardware unavailable:") || !strings.Contains(v, fail.Error()) {
		t.Errorf("error not shown verbatim:\n%s", v)
	}
	send(m, common.RefreshMsg{})
	if !strings.Contains(view(m), "esx-lab-01") {
		t.Error("refresh did not load the inventory")
	}
	// a failed refresh keeps the page and says so
	send(m, common.RefreshMsg{})
	if v := ansi.Strip(view(m)); !strings.Contains(v, "esx-lab-01") || !strings.Contains(v, "refresh failed: "+fail.Error()) {
		t.Errorf("failed refresh:\n%s", v)
	}
	// a refresh while one is in flight starts no second load
	_, cmd := m.Update(common.RefreshMsg{})
	if cmd == nil {
		t.Fatal("refresh started no load")
	}
	if !strings.Contains(view(m), "refreshing...") {
		t.Error("no refreshing note while the load is in flight")
	}
	if _, again := m.Update(common.ActivateMsg{}); again != nil {
		t.Error("a second load started while one is in flight")
	}
	if m.Capturing() {
		t.Error("Capturing = true; the screen has no field")
	}
}

func TestSizes(t *testing.T) {
	for _, sz := range [][2]int{{76, 17}, {40, 10}, {100, 30}} {
		for _, tier := range []term.Tier{term.Rich, term.Linux, term.Plain} {
			m := newModel(t, tier, fakeSources())
			m.SetSize(sz[0], sz[1])
			send(m, common.ActivateMsg{})
			for _, k := range []string{"1", "2", "3", "end"} {
				press(m, k)
				tuitest.CheckSize(t, view(m), sz[0], sz[1])
			}
		}
	}
}
