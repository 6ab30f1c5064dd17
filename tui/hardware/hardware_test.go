package hardware

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

// The app gives screens 76x17 at an 80x24 terminal.
const width, height = 76, 17

func ptr[T any](v T) *T { return &v }

func fakeInventory() *hostinfo.Inventory {
	return &hostinfo.Inventory{
		Hostname: "esx-lab-01",
		OS:       hostinfo.OSInfo{PrettyName: "Debian GNU/Linux 12 (bookworm)", Kernel: "6.1.0-18-amd64"},
		CPU: hostinfo.CPUInfo{Vendor: "GenuineIntel", Model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
			Sockets: ptr(2), Cores: ptr(64), Threads: ptr(128), VirtFlags: []string{"vmx", "ept", "vpid"}},
		Memory: hostinfo.MemoryInfo{TotalBytes: ptr(uint64(256 << 30)), AvailableBytes: ptr(uint64(201 << 30))},
		NUMA: hostinfo.NUMAInfo{Nodes: []hostinfo.NUMANode{
			{ID: 0, CPUs: "0-31,64-95", MemTotalBytes: ptr(uint64(128 << 30)), MemFreeBytes: ptr(uint64(100 << 30)),
				Hugepages: []hostinfo.HugepagePool{{SizeKiB: 2048, Total: ptr(uint64(512)), Free: ptr(uint64(500)), Surplus: ptr(uint64(0))}}},
			{ID: 1, CPUs: "32-63,96-127", MemTotalBytes: ptr(uint64(128 << 30)), MemFreeBytes: ptr(uint64(101 << 30)),
				Hugepages: []hostinfo.HugepagePool{{SizeKiB: 2048, Total: ptr(uint64(512)), Free: ptr(uint64(512)), Surplus: ptr(uint64(0))}}},
		}},
		Hugepages: hostinfo.HugepageInfo{
			DefaultSizeKiB: ptr(uint64(2048)), THP: "madvise",
			Pools: []hostinfo.HugepagePool{
				{SizeKiB: 2048, Total: ptr(uint64(1024)), Free: ptr(uint64(1012)), Reserved: ptr(uint64(4)), Surplus: ptr(uint64(0))},
				{SizeKiB: 1048576, Total: ptr(uint64(0)), Free: ptr(uint64(0)), Reserved: ptr(uint64(0)), Surplus: ptr(uint64(0))},
			},
			Mounts: []hostinfo.HugetlbfsMount{{Path: "/dev/hugepages", PageSizeKiB: 2048}},
		},
		PCI: []hostinfo.PCIDevice{
			{Address: "0000:00:00.0", Vendor: "Intel Corporation", Product: "Ice Lake Memory Map/VT-d", Class: "060000", ClassName: "Host bridge", IOMMUGroup: ptr(0), NUMANode: ptr(0)},
			{Address: "0000:17:00.0", Vendor: "NVIDIA Corporation", Product: "GA102GL [A40]", Class: "030200", ClassName: "3D controller", Driver: "vfio-pci", IOMMUGroup: ptr(12), NUMANode: ptr(0)},
			{Address: "0000:17:00.1", Vendor: "NVIDIA Corporation", Product: "GA102 High Definition Audio", Class: "040300", ClassName: "Audio device", Driver: "vfio-pci", IOMMUGroup: ptr(12), NUMANode: ptr(0)},
			{Address: "0000:31:00.0", Vendor: "Intel Corporation", Product: "Ethernet Controller E810-C", Class: "020000", ClassName: "Ethernet controller", Driver: "ice", IOMMUGroup: ptr(30), NUMANode: ptr(1)},
			{Address: "0000:03:00.0", VendorID: "1a03", DeviceID: "2000", Class: "030000", ClassName: "VGA compatible controller", Driver: "ast", IOMMUGroup: ptr(5), NUMANode: ptr(-1)},
		},
		GPUs: []hostinfo.GPU{
			{Address: "0000:17:00.0", Vendor: "NVIDIA Corporation", Product: "GA102GL [A40]", Driver: "vfio-pci", IOMMUGroup: ptr(12), GroupPeers: []string{"0000:17:00.1"}},
			{Address: "0000:03:00.0", Driver: "ast", IOMMUGroup: ptr(5), BootVGA: true},
		},
		NICs: []hostinfo.NIC{
			{Name: "eno1", MAC: "3c:ec:ef:12:34:56", State: "up", SpeedMbps: ptr(25000), Driver: "ice"},
			{Name: "br0", MAC: "3c:ec:ef:12:34:56", State: "up", Driver: "bridge", Virtual: true},
		},
		Block: []hostinfo.BlockDev{
			{Name: "nvme0n1", SizeBytes: 1000204886016, Type: "ssd", Controller: "nvme", Vendor: "Samsung", Model: "PM9A3"},
			{Name: "sda", SizeBytes: 32 << 30, Type: "hdd", Controller: "usb", Model: "Flash Disk", Removable: true},
		},
		KVM:      hostinfo.KVMInfo{Backend: "kvm_intel", DevicePresent: true},
		IOMMU:    hostinfo.IOMMUInfo{FirmwareTable: "DMAR", Cmdline: []string{"intel_iommu=on", "iommu=pt"}, Groups: make([]hostinfo.IOMMUGroup, 4)},
		Unknowns: []hostinfo.UnknownField{},
	}
}

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
		return fakeInventory(), fakeReport(), nil
	}}
}

func newModel(tier term.Tier, src Sources) *Model {
	c := common.New(context.Background(), tier, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	for _, tier := range []term.Tier{term.Rich, term.Plain} {
		for _, sec := range []struct {
			name string
			key  string
		}{{"summary", "1"}, {"checks", "2"}, {"pci", "3"}, {"hugepages", "4"}, {"nics", "5"}} {
			t.Run(tier.String()+"_"+sec.name, func(t *testing.T) {
				m := newModel(tier, fakeSources())
				send(m, common.ActivateMsg{})
				press(m, sec.key)
				out := view(m)
				tuitest.CheckSize(t, out, width, height)
				teatest.RequireEqualOutput(t, []byte(out))
			})
		}
	}
}

// TestProgram runs the screen in a real Bubble Tea program: the load
// happens in a Cmd and the page appears.
func TestProgram(t *testing.T) {
	m := newModel(term.Plain, fakeSources())
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
	m := newModel(term.Plain, fakeSources())
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
	loading := newModel(term.Plain, fakeSources())
	tuitest.RequireASCII(t, view(loading))
}

func TestSectionsAndCLI(t *testing.T) {
	m := newModel(term.Rich, fakeSources())
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
	m := newModel(term.Plain, fakeSources())
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
	m := newModel(term.Plain, fakeSources())
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
	inv := fakeInventory()
	for i := range inv.PCI {
		inv.PCI[i].IOMMUGroup = nil
	}
	m := newModel(term.Plain, Sources{Host: func(context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
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
	m := newModel(term.Plain, Sources{Host: func(context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
		calls++
		if calls == 1 || calls == 3 {
			return nil, nil, fail
		}
		return fakeInventory(), fakeReport(), nil
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
			m := newModel(tier, fakeSources())
			m.SetSize(sz[0], sz[1])
			send(m, common.ActivateMsg{})
			for _, k := range []string{"1", "2", "3", "end"} {
				press(m, k)
				tuitest.CheckSize(t, view(m), sz[0], sz[1])
			}
		}
	}
}
