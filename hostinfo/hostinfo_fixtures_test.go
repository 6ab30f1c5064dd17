package hostinfo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
)

// The fixture trees under testdata/hosts are described in its README.md.

func fixtureRoot(name string) string { return filepath.Join("testdata", "hosts", name) }

// copyFixture copies a fixture tree, symlinks and all, into a temporary
// directory that the test may damage.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if err := os.CopyFS(dst, os.DirFS(fixtureRoot(name))); err != nil {
		t.Fatalf("copy fixture %s: %v", name, err)
	}
	return dst
}

func ptr[T any](v T) *T { return &v }

func requiredCapsResult() map[string]bool {
	return map[string]bool{
		"KVM_CAP_IRQCHIP": true, "KVM_CAP_HLT": true, "KVM_CAP_USER_MEMORY": true, "KVM_CAP_SET_TSS_ADDR": true,
		"KVM_CAP_EXT_CPUID": true, "KVM_CAP_NR_VCPUS": true, "KVM_CAP_MAX_VCPUS": true, "KVM_CAP_SYNC_MMU": true,
		"KVM_CAP_IMMEDIATE_EXIT": true,
	}
}

// Probe results as kvmprobe.Run returns them on each kind of host.
var (
	probeFast = kvmprobe.Result{APIVersion: 12, Extensions: requiredCapsResult(), MaxVCPUs: 1024,
		Stage: kvmprobe.StageDone, IOExitOK: true, HaltOK: true,
		LoopIterations: 100_000_000, LoopNanos: 40_000_000, ItersPerSec: 2.5e9, ElapsedNanos: 65_000_000}
	// kvm_pvm in a nested VM: the first KVM_RUN never comes back.
	probePVMTimeout = kvmprobe.Result{APIVersion: 12, Extensions: requiredCapsResult(), MaxVCPUs: 1024,
		Stage: kvmprobe.StageRunIO, TimedOut: true, ElapsedNanos: 3_000_000_000,
		Error: `kvm probe timed out after 3s in stage "run-io"; child killed`}
	// kvm_pvm where the guest does get through, a thousand times too slowly.
	probePVMSlow = kvmprobe.Result{APIVersion: 12, Extensions: requiredCapsResult(), MaxVCPUs: 1024,
		Stage: kvmprobe.StageDone, IOExitOK: true, HaltOK: true,
		LoopIterations: 800_000, LoopNanos: 400_000_000, ItersPerSec: 2e6, ElapsedNanos: 450_000_000}
)

func qemuVersion(context.Context, string) (string, error) { return "QEMU emulator version 8.2.2", nil }

// checkOpts injects the probe (nil: the probe must not run) and QEMU
// version so that nothing on this machine is run or opened.
func checkOpts(t *testing.T, root string, probe *kvmprobe.Result, euid int) (CheckOptions, *[]string) {
	var calls []string
	return CheckOptions{
		Options: Options{Root: root},
		Probe: func(_ context.Context, device string) kvmprobe.Result {
			calls = append(calls, device)
			if probe == nil {
				t.Errorf("probe called with %s; want no probe run", device)
				return kvmprobe.Result{Device: device, Error: "unexpected probe"}
			}
			r := *probe
			r.Device = device
			return r
		},
		QEMUVersion: qemuVersion,
		EUID:        &euid,
		LookPath: func(string) (string, error) {
			t.Errorf("LookPath called on a non-live root")
			return "", os.ErrNotExist
		},
	}, &calls
}

func statuses(r *Report) map[string]Status {
	m := map[string]Status{}
	for _, c := range r.Checks {
		m[c.ID] = c.Status
	}
	return m
}

// unknownFields lists the Unknowns' field names, leaving out pci.names:
// ghw reads pci.ids from this machine, not from the host root, so whether
// names are known depends on where the tests run.
func unknownFields(inv *Inventory) []string {
	out := []string{}
	for _, u := range inv.Unknowns {
		if u.Field != "pci.names" {
			out = append(out, u.Field)
		}
	}
	return out
}

func collect(t *testing.T, root string) *Inventory {
	t.Helper()
	inv, err := Collect(context.Background(), Options{Root: root})
	if err != nil {
		t.Fatalf("Collect(%s): %v", root, err)
	}
	return inv
}

type checkCase struct {
	name    string
	fixture string
	probe   *kvmprobe.Result
	want    map[string]Status
	details map[string]string // check id -> substring its detail must contain
	accel   string
}

var checkCases = []checkCase{
	{
		name: "intel-iommu", fixture: "intel-iommu", probe: &probeFast, accel: AccelKVM,
		want: map[string]Status{
			"cpu.virt-flags": Pass, "kvm.module": Pass, "kvm.device": Pass, "kvm.api": Pass, "kvm.probe": Pass,
			"host.hypervisor": Pass, "kvm.nested": Pass, "iommu.firmware": Pass, "iommu.kernel": Pass,
			"iommu.passthrough": Warn, "iommu.passthrough.0000:01:00.0": Warn, "iommu.passthrough.0000:65:00.0": Pass,
			"hugepages": Pass, "dev.tun": Pass, "dev.vhost-net": Pass, "dev.vhost-vsock": Pass,
			"cgroup.v2": Pass, "vm.scopes": Warn, "qemu.binary": Pass, "firmware.ovmf": Pass,
		},
		details: map[string]string{
			"iommu.kernel":                   "6 IOMMU groups, units dmar0 dmar1; cmdline intel_iommu=on iommu=pt",
			"iommu.passthrough":              "1 of 2 GPUs ready",
			"iommu.passthrough.0000:01:00.0": "IOMMU group 2 is shared with 0000:02:00.0",
			"iommu.passthrough.0000:65:00.0": "IOMMU group 21 holds only this card (with its functions 0000:65:00.1",
			"hugepages":                      "2M: 1024 (768 free), 1G: 4 (4 free); THP madvise",
			"qemu.binary":                    "version 8.2.2",
		},
	},
	{
		name: "amd-ivrs-off", fixture: "amd-ivrs-off", probe: &probeFast, accel: AccelKVM,
		want: map[string]Status{
			"cpu.virt-flags": Pass, "kvm.module": Pass, "kvm.device": Pass, "kvm.api": Pass, "kvm.probe": Pass,
			"host.hypervisor": Pass, "kvm.nested": Pass, "iommu.firmware": Pass, "iommu.kernel": Warn,
			"iommu.passthrough": Warn, "iommu.passthrough.0000:03:00.0": Warn,
			"hugepages": Warn, "dev.tun": Pass, "dev.vhost-net": Pass, "dev.vhost-vsock": Warn,
			"cgroup.v2": Pass, "vm.scopes": Warn, "qemu.binary": Pass, "firmware.ovmf": Pass,
		},
		details: map[string]string{
			"iommu.firmware":                 "IVRS",
			"iommu.kernel":                   "kernel command line has amd_iommu=off",
			"iommu.passthrough.0000:03:00.0": "no IOMMU group",
			"hugepages":                      "no hugepages reserved",
			"qemu.binary":                    filepath.Join("usr", "libexec", "qemu-kvm"),
		},
	},
	{
		name: "pvm-build/timeout", fixture: "pvm-build", probe: &probePVMTimeout, accel: AccelTCG,
		want: pvmWant,
		details: map[string]string{
			"kvm.probe": `timed out after 3s in stage "run-io"`,
			"kvm.api":   "API version 12",
			"cgroup.v2": "hybrid",
		},
	},
	{
		name: "pvm-build/slow", fixture: "pvm-build", probe: &probePVMSlow, accel: AccelTCG,
		want:    pvmWant,
		details: map[string]string{"kvm.probe": "2.0M iter/s, below the hardware-like minimum"},
	},
	{
		name: "container", fixture: "container", probe: nil, accel: AccelNone,
		want: map[string]Status{
			"cpu.virt-flags": Pass, "kvm.module": Fail, "kvm.device": Fail, "kvm.api": Unknown, "kvm.probe": Fail,
			"host.hypervisor": Pass, "kvm.nested": Unknown, "iommu.firmware": Unknown, "iommu.kernel": Warn,
			"iommu.passthrough": Pass,
			"hugepages":         Unknown, "dev.tun": Fail, "dev.vhost-net": Warn, "dev.vhost-vsock": Warn,
			"cgroup.v2": Pass, "vm.scopes": Warn, "qemu.binary": Fail, "firmware.ovmf": Warn,
		},
		details: map[string]string{
			"kvm.probe":   "not run: no /dev/kvm",
			"qemu.binary": "not found",
		},
	},
}

var pvmWant = map[string]Status{
	"cpu.virt-flags": Fail, "kvm.module": Warn, "kvm.device": Pass, "kvm.api": Pass, "kvm.probe": Fail,
	"host.hypervisor": Warn, "kvm.nested": Unknown, "iommu.firmware": Warn, "iommu.kernel": Warn,
	"iommu.passthrough": Pass,
	"hugepages":         Warn, "dev.tun": Pass, "dev.vhost-net": Warn, "dev.vhost-vsock": Warn,
	"cgroup.v2": Warn, "vm.scopes": Warn, "qemu.binary": Pass, "firmware.ovmf": Pass,
}

func TestFixtureChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := fixtureRoot(tc.fixture)
			inv := collect(t, root)
			opts, calls := checkOpts(t, root, tc.probe, 0)
			r := RunChecks(context.Background(), inv, opts)

			got := statuses(r)
			if len(got) != len(r.Checks) {
				t.Errorf("got %d checks with %d distinct ids; want unique ids", len(r.Checks), len(got))
			}
			for id, want := range tc.want {
				if g, ok := got[id]; !ok {
					t.Errorf("check %s: missing; want %s", id, want)
				} else if g != want {
					c, _ := r.Check(id)
					t.Errorf("check %s: got %s (%s); want %s", id, g, c.Detail, want)
				}
			}
			for id, g := range got {
				if _, ok := tc.want[id]; !ok {
					t.Errorf("check %s: got unexpected check with status %s", id, g)
				}
			}
			for id, sub := range tc.details {
				if c, _ := r.Check(id); !strings.Contains(c.Detail, sub) {
					t.Errorf("check %s: got detail %q; want it to contain %q", id, c.Detail, sub)
				}
			}
			for _, c := range r.Checks {
				if (c.Status == Fail || c.Status == Warn) && c.Hint == "" {
					t.Errorf("check %s: got %s without a hint; want a fix for every WARN and FAIL", c.ID, c.Status)
				}
			}
			if r.Acceleration != tc.accel {
				t.Errorf("acceleration: got %s (%s); want %s", r.Acceleration, r.AccelerationReason, tc.accel)
			}
			anyFail := false
			for _, s := range got {
				anyFail = anyFail || s == Fail
			}
			if r.Failed() != anyFail {
				t.Errorf("Failed(): got %v; want %v (true exactly when a check FAILs)", r.Failed(), anyFail)
			}

			wantCalls := []string{filepath.Join(root, "dev/kvm")}
			if tc.probe == nil {
				wantCalls = nil
			}
			if !slices.Equal(*calls, wantCalls) {
				t.Errorf("probe calls: got %q; want %q", *calls, wantCalls)
			}
		})
	}
}

// On a root that is not the live machine every file is read as it is, so
// judging for a non-root user must not change any status: "needs root" is
// only for what permissions actually hide.
func TestFixtureChecksNonRootEUID(t *testing.T) {
	t.Parallel()
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := fixtureRoot(tc.fixture)
			inv := collect(t, root)
			opts, _ := checkOpts(t, root, tc.probe, 1000)
			got := statuses(RunChecks(context.Background(), inv, opts))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("statuses for uid 1000: got %v; want %v", got, tc.want)
			}
		})
	}
}

type nodeWant struct {
	id       int
	cpus     string
	memTotal *uint64
	pools    []HugepagePool
}

type gpuWant struct {
	address string
	driver  string
	group   *int
	peers   []string
	bootVGA bool
}

type pciWant struct {
	class  string
	driver string
	group  *int
	numa   *int
}

type nicWant struct {
	name    string
	virtual bool
	speed   *int
	mtu     int
	driver  string
	pci     string
}

type inventoryWant struct {
	hostname, osID, kernel  string
	vendor                  string
	sockets, cores, threads *int
	virtFlags               []string
	underHypervisor         bool // the CPU's hypervisor flag: not a virt flag
	memTotal                *uint64
	nodes                   []nodeWant // nil: NUMA unknown
	defaultHugepageKiB      *uint64
	pools                   []HugepagePool // nil: unreadable
	mounts                  []HugetlbfsMount
	thp                     string
	pciCount                int
	pci                     map[string]pciWant
	gpus                    []gpuWant
	nics                    []nicWant
	block                   []string
	backend                 string
	modules                 []string
	nested                  string // the backend's nested parameter, "" when it has none
	devicePresent           bool
	firmwareTable           string
	units, cmdline          []string
	groups                  map[int][]string
	unknowns                []string
	unknownReasons          map[string]string // field -> substring of its reason
	paramCheck              map[string]string // module/param -> value
}

const kib = uint64(1024)

func pool(size, total, free, surplus uint64, reserved *uint64) HugepagePool {
	return HugepagePool{SizeKiB: size, Total: &total, Free: &free, Surplus: &surplus, Reserved: reserved}
}

var zeroPools = []HugepagePool{pool(2048, 0, 0, 0, nil), pool(1048576, 0, 0, 0, nil)}

var inventoryCases = map[string]inventoryWant{
	"intel-iommu": {
		hostname: "kvm-intel-01", osID: "ubuntu", kernel: "6.8.0-45-generic", vendor: "GenuineIntel",
		sockets: ptr(2), cores: ptr(4), threads: ptr(8), virtFlags: []string{"vmx", "ept"},
		memTotal: ptr(263842580 * kib),
		nodes: []nodeWant{
			{0, "0-1,4-5", ptr(131731292 * kib), []HugepagePool{pool(2048, 512, 384, 0, nil), pool(1048576, 2, 2, 0, nil)}},
			{1, "2-3,6-7", ptr(132111288 * kib), []HugepagePool{pool(2048, 512, 384, 0, nil), pool(1048576, 2, 2, 0, nil)}},
		},
		defaultHugepageKiB: ptr(uint64(2048)),
		pools:              []HugepagePool{pool(2048, 1024, 768, 0, ptr(uint64(128))), pool(1048576, 4, 4, 0, ptr(uint64(0)))},
		mounts:             []HugetlbfsMount{{"/dev/hugepages", 2048}, {"/dev/hugepages1G", 1048576}},
		thp:                "madvise",
		pciCount:           10,
		pci: map[string]pciWant{
			"0000:00:00.0": {"060000", "", ptr(0), ptr(0)},
			"0000:02:00.0": {"010802", "nvme", ptr(2), ptr(0)},
			"0000:17:00.0": {"020000", "ixgbe", ptr(11), ptr(0)},
			"0000:65:00.0": {"030000", "vfio-pci", ptr(21), ptr(1)},
			"0000:65:00.1": {"040300", "vfio-pci", ptr(21), ptr(1)},
		},
		gpus: []gpuWant{
			{"0000:01:00.0", "nvidia", ptr(2), []string{"0000:00:01.0", "0000:00:01.1", "0000:02:00.0"}, true},
			{"0000:65:00.0", "vfio-pci", ptr(21), []string{"0000:65:00.1"}, false},
		},
		nics: []nicWant{
			{"br0", true, nil, 1500, "", ""},
			{"enp23s0f0", false, ptr(10000), 9000, "ixgbe", "0000:17:00.0"},
		},
		block:   []string{"nvme0n1"},
		backend: "kvm_intel", modules: []string{"kvm_intel", "kvm"}, nested: "Y", devicePresent: true,
		firmwareTable: "DMAR", units: []string{"dmar0", "dmar1"}, cmdline: []string{"intel_iommu=on", "iommu=pt"},
		groups: map[int][]string{
			0: {"0000:00:00.0"}, 2: {"0000:00:01.0", "0000:00:01.1", "0000:01:00.0", "0000:02:00.0"},
			10: {"0000:16:02.0"}, 11: {"0000:17:00.0"}, 20: {"0000:64:02.0"}, 21: {"0000:65:00.0", "0000:65:00.1"},
		},
		unknowns: []string{},
	},
	"amd-ivrs-off": {
		hostname: "epyc-lab-02", osID: "rocky", kernel: "5.14.0-427.13.1.el9_4.x86_64", vendor: "AuthenticAMD",
		sockets: ptr(1), cores: ptr(4), threads: ptr(8), virtFlags: []string{"svm", "npt"},
		memTotal:           ptr(65540836 * kib),
		nodes:              []nodeWant{{0, "0-7", ptr(65540836 * kib), zeroPools}},
		defaultHugepageKiB: ptr(uint64(2048)),
		pools:              []HugepagePool{pool(2048, 0, 0, 0, ptr(uint64(0))), pool(1048576, 0, 0, 0, ptr(uint64(0)))},
		mounts:             []HugetlbfsMount{{"/dev/hugepages", 2048}},
		thp:                "always",
		pciCount:           6,
		pci: map[string]pciWant{
			"0000:01:00.0": {"020000", "igb", nil, ptr(0)},
			"0000:03:00.0": {"030000", "amdgpu", nil, ptr(0)},
		},
		gpus:    []gpuWant{{"0000:03:00.0", "amdgpu", nil, []string{}, true}},
		nics:    []nicWant{{"eno1", false, ptr(1000), 1500, "igb", "0000:01:00.0"}, {"virbr0", true, nil, 1500, "", ""}},
		block:   []string{},
		backend: "kvm_amd", modules: []string{"kvm_amd", "kvm"}, nested: "1", devicePresent: true,
		firmwareTable: "IVRS", units: []string{}, cmdline: []string{"amd_iommu=off"}, groups: map[int][]string{},
		unknowns: []string{},
	},
	"pvm-build": {
		hostname: "build", osID: "debian", kernel: "6.18.44-fc-v669", vendor: "AuthenticAMD",
		sockets: ptr(1), cores: ptr(2), threads: ptr(2), virtFlags: []string{}, underHypervisor: true,
		memTotal:           ptr(24684084 * kib),
		nodes:              []nodeWant{{0, "0-1", ptr(5597388 * kib), zeroPools}},
		defaultHugepageKiB: ptr(uint64(2048)),
		pools:              []HugepagePool{pool(2048, 0, 0, 0, ptr(uint64(0))), pool(1048576, 0, 0, 0, ptr(uint64(0)))},
		mounts:             []HugetlbfsMount{},
		thp:                "madvise",
		pciCount:           6,
		pci: map[string]pciWant{
			"0000:00:00.0": {"060000", "", nil, nil},
			"0000:00:03.0": {"020000", "virtio-pci", nil, nil},
			"0000:00:04.0": {"ffff00", "virtio-pci", nil, nil},
		},
		gpus:    []gpuWant{},
		nics:    []nicWant{{"eth0", false, nil, 1400, "virtio_net", "0000:00:03.0"}, {"ifb0", true, nil, 1500, "", ""}},
		block:   []string{"vda"},
		backend: "kvm_pvm", modules: []string{"kvm_pvm", "kvm"}, devicePresent: true,
		firmwareTable: "", units: []string{}, cmdline: []string{}, groups: map[int][]string{},
		unknowns:   []string{},
		paramCheck: map[string]string{"kvm_pvm/pvm_native": "Y", "kvm_pvm/hb_mask": "8388607", "kvm/tdp_mmu": "N"},
	},
	"container": {
		hostname: "3f2a9c1d7e5b", osID: "debian", kernel: "6.8.0-45-generic", vendor: "GenuineIntel",
		virtFlags: []string{"vmx", "ept"}, memTotal: ptr(8388608 * kib),
		defaultHugepageKiB: ptr(uint64(2048)),
		mounts:             []HugetlbfsMount{},
		pci:                map[string]pciWant{},
		gpus:               []gpuWant{},
		nics:               []nicWant{{"eth0", true, ptr(10000), 1500, "", ""}},
		block:              []string{},
		backend:            "none", modules: []string{},
		units: []string{}, cmdline: []string{}, groups: map[int][]string{},
		unknowns: []string{"cpu.topology", "numa", "hugepages.pools", "hugepages.transparent"},
		unknownReasons: map[string]string{
			"numa":            filepath.Join("sys", "devices", "system", "node"),
			"hugepages.pools": filepath.Join("sys", "kernel", "mm", "hugepages"),
		},
	},
}

func TestFixtureInventory(t *testing.T) {
	t.Parallel()
	for name, want := range inventoryCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inv := collect(t, fixtureRoot(name))
			checkInventory(t, inv, want)
		})
	}
}

func eq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: got %v; want %v", what, show(got), show(want))
	}
}

// show dereferences pointers so that messages print values, not addresses.
func show(v any) any {
	switch p := v.(type) {
	case *int:
		if p == nil {
			return "<nil>"
		}
		return *p
	case *uint64:
		if p == nil {
			return "<nil>"
		}
		return *p
	case []HugepagePool:
		var out []string
		for _, x := range p {
			out = append(out, poolString(x))
		}
		return out
	}
	return v
}

func poolString(p HugepagePool) string {
	return fmt.Sprintf("%dkB{total %v free %v resv %v surp %v}", p.SizeKiB, show(p.Total), show(p.Free), show(p.Reserved), show(p.Surplus))
}

func checkInventory(t *testing.T, inv *Inventory, w inventoryWant) {
	t.Helper()
	eq(t, "hostname", inv.Hostname, w.hostname)
	eq(t, "os.id", inv.OS.ID, w.osID)
	eq(t, "os.kernel", inv.OS.Kernel, w.kernel)
	eq(t, "cpu.vendor", inv.CPU.Vendor, w.vendor)
	eq(t, "cpu.sockets", show(inv.CPU.Sockets), show(w.sockets))
	eq(t, "cpu.cores", show(inv.CPU.Cores), show(w.cores))
	eq(t, "cpu.threads", show(inv.CPU.Threads), show(w.threads))
	eq(t, "cpu.virtFlags", inv.CPU.VirtFlags, w.virtFlags)
	eq(t, "cpu.runsUnderHypervisor", inv.CPU.RunsUnderHypervisor, w.underHypervisor)
	eq(t, "memory.totalBytes", show(inv.Memory.TotalBytes), show(w.memTotal))

	if w.nodes == nil {
		if inv.NUMA.Nodes != nil {
			t.Errorf("numa.nodes: got %d nodes; want nil (unknown)", len(inv.NUMA.Nodes))
		}
	} else {
		eq(t, "numa node count", len(inv.NUMA.Nodes), len(w.nodes))
		for i := range min(len(inv.NUMA.Nodes), len(w.nodes)) {
			g, n := inv.NUMA.Nodes[i], w.nodes[i]
			eq(t, "numa node id", g.ID, n.id)
			eq(t, "numa node cpus", g.CPUs, n.cpus)
			eq(t, "numa node memTotal", show(g.MemTotalBytes), show(n.memTotal))
			eq(t, "numa node hugepages", show(g.Hugepages), show(n.pools))
		}
	}

	eq(t, "hugepages.defaultSizeKiB", show(inv.Hugepages.DefaultSizeKiB), show(w.defaultHugepageKiB))
	if w.pools == nil {
		if inv.Hugepages.Pools != nil {
			t.Errorf("hugepages.pools: got %v; want nil (unknown)", show(inv.Hugepages.Pools))
		}
	} else {
		eq(t, "hugepages.pools", show(inv.Hugepages.Pools), show(w.pools))
	}
	eq(t, "hugepages.mounts", inv.Hugepages.Mounts, w.mounts)
	eq(t, "hugepages.transparent", inv.Hugepages.THP, w.thp)

	eq(t, "pci count", len(inv.PCI), w.pciCount)
	byAddr := map[string]PCIDevice{}
	for _, d := range inv.PCI {
		byAddr[d.Address] = d
	}
	for addr, pw := range w.pci {
		d, ok := byAddr[addr]
		if !ok {
			t.Errorf("pci %s: missing", addr)
			continue
		}
		eq(t, "pci "+addr+" class", d.Class, pw.class)
		eq(t, "pci "+addr+" driver", d.Driver, pw.driver)
		eq(t, "pci "+addr+" iommuGroup", show(d.IOMMUGroup), show(pw.group))
		eq(t, "pci "+addr+" numaNode", show(d.NUMANode), show(pw.numa))
		if d.VendorID == "" || d.DeviceID == "" || d.ClassName == "" {
			t.Errorf("pci %s: got vendorID %q deviceID %q className %q; want all set", addr, d.VendorID, d.DeviceID, d.ClassName)
		}
	}

	eq(t, "gpu count", len(inv.GPUs), len(w.gpus))
	for i := range min(len(inv.GPUs), len(w.gpus)) {
		g, gw := inv.GPUs[i], w.gpus[i]
		eq(t, "gpu address", g.Address, gw.address)
		eq(t, "gpu "+g.Address+" driver", g.Driver, gw.driver)
		eq(t, "gpu "+g.Address+" iommuGroup", show(g.IOMMUGroup), show(gw.group))
		eq(t, "gpu "+g.Address+" groupPeers", g.GroupPeers, gw.peers)
		eq(t, "gpu "+g.Address+" bootVGA", g.BootVGA, gw.bootVGA)
	}

	eq(t, "nic count (lo skipped)", len(inv.NICs), len(w.nics))
	for i := range min(len(inv.NICs), len(w.nics)) {
		n, nw := inv.NICs[i], w.nics[i]
		eq(t, "nic name", n.Name, nw.name)
		eq(t, "nic "+n.Name+" virtual", n.Virtual, nw.virtual)
		eq(t, "nic "+n.Name+" speed", show(n.SpeedMbps), show(nw.speed))
		eq(t, "nic "+n.Name+" mtu", show(n.MTU), nw.mtu)
		eq(t, "nic "+n.Name+" driver", n.Driver, nw.driver)
		eq(t, "nic "+n.Name+" pci", n.PCI, nw.pci)
	}

	blocks := []string{}
	for _, b := range inv.Block {
		blocks = append(blocks, b.Name)
		if b.SizeBytes == 0 {
			t.Errorf("block %s: got size 0; want the fixture's size", b.Name)
		}
	}
	eq(t, "block devices", blocks, w.block)

	eq(t, "kvm.backend", inv.KVM.Backend, w.backend)
	mods := []string{}
	for _, m := range inv.KVM.Modules {
		mods = append(mods, m.Name)
	}
	eq(t, "kvm.modules", mods, w.modules)
	if v, ok := inv.KVM.param(w.backend, "nested"); w.nested != "" && (!ok || v != w.nested) {
		t.Errorf("kvm %s nested: got %q (present %v); want %q", w.backend, v, ok, w.nested)
	}
	for k, want := range w.paramCheck {
		mod, p, _ := strings.Cut(k, "/")
		if v, _ := inv.KVM.param(mod, p); v != want {
			t.Errorf("kvm param %s: got %q; want %q", k, v, want)
		}
	}
	eq(t, "kvm.devicePresent", inv.KVM.DevicePresent, w.devicePresent)

	eq(t, "iommu.firmwareTable", inv.IOMMU.FirmwareTable, w.firmwareTable)
	eq(t, "iommu.units", inv.IOMMU.Units, w.units)
	eq(t, "iommu.cmdline", inv.IOMMU.Cmdline, w.cmdline)
	groups := map[int][]string{}
	for _, g := range inv.IOMMU.Groups {
		groups[g.ID] = g.Devices
	}
	eq(t, "iommu.groups", groups, w.groups)

	eq(t, "unknowns", unknownFields(inv), w.unknowns)
	for field, sub := range w.unknownReasons {
		found := false
		for _, u := range inv.Unknowns {
			if u.Field == field {
				found = true
				if !strings.Contains(u.Reason, sub) {
					t.Errorf("unknown %s: got reason %q; want it to name %q", field, u.Reason, sub)
				}
			}
		}
		if !found {
			t.Errorf("unknowns: got no %s entry; want one naming %q", field, sub)
		}
	}
}

// Any file that cannot be read becomes an Unknowns entry naming its path,
// never a crash or a silent zero. A directory where a file belongs fails
// the read with EISDIR, even for root (who reads chmod 000 files anyway).
func TestUnreadableFileIsUnknown(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fixture string
		file    string // made a directory
		field   string // the Unknowns entry it must produce
		checks  map[string]Status
	}{
		{"intel-iommu", "proc/meminfo", "memory", nil},
		{"intel-iommu", "proc/cpuinfo", "cpu", map[string]Status{"cpu.virt-flags": Unknown, "host.hypervisor": Unknown}},
		{"intel-iommu", "proc/mounts", "hugepages.mounts", map[string]Status{"cgroup.v2": Unknown}},
		{"intel-iommu", "proc/cmdline", "iommu.cmdline", nil},
		{"intel-iommu", "sys/kernel/mm/transparent_hugepage/enabled", "hugepages.transparent", map[string]Status{"hugepages": Pass}},
		{"intel-iommu", "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "hugepages.pools[2048kB].nr_hugepages", map[string]Status{"hugepages": Pass}},
		{"amd-ivrs-off", "sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages", "hugepages.pools[1048576kB].free_hugepages", map[string]Status{"hugepages": Warn}},
		{"intel-iommu", "sys/devices/system/node/node1/meminfo", "numa.nodes[1].memory", nil},
		{"intel-iommu", "sys/devices/system/node/node0/cpulist", "numa.nodes[0].cpus", nil},
		{"intel-iommu", "sys/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages", "numa.nodes[1].hugepages[2048kB].free_hugepages", nil},
		{"intel-iommu", "sys/bus/pci/devices/0000:65:00.0/vendor", "pci[0000:65:00.0].vendorID", map[string]Status{"iommu.passthrough.0000:65:00.0": Pass}},
		{"intel-iommu", "sys/bus/pci/devices/0000:65:00.1/class", "pci[0000:65:00.1].class", nil},
		{"intel-iommu", "sys/class/net/enp23s0f0/mtu", "nics[enp23s0f0].mtu", nil},
		{"pvm-build", "sys/class/net/eth0/address", "nics[eth0].mac", nil},
		{"container", "proc/sys/kernel/osrelease", "os.kernel", nil},
		{"container", "sys/fs/cgroup/cgroup.controllers", "", map[string]Status{"cgroup.v2": Unknown}},
	}
	for _, tc := range cases {
		t.Run(tc.fixture+"/"+tc.file, func(t *testing.T) {
			t.Parallel()
			root := copyFixture(t, tc.fixture)
			p := filepath.Join(root, tc.file)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			inv := collect(t, root)
			if tc.field != "" {
				assertUnknown(t, inv, tc.field, p)
			}
			opts, _ := checkOpts(t, root, &probeFast, 0)
			r := RunChecks(context.Background(), inv, opts)
			for id, want := range tc.checks {
				if c, ok := r.Check(id); !ok || c.Status != want {
					t.Errorf("check %s: got %s (%s); want %s", id, c.Status, c.Detail, want)
				}
			}
		})
	}
}

func assertUnknown(t *testing.T, inv *Inventory, field, path string) {
	t.Helper()
	for _, u := range inv.Unknowns {
		if u.Field == field {
			if !strings.Contains(u.Reason, path) {
				t.Errorf("unknown %s: got reason %q; want it to name %s", field, u.Reason, path)
			}
			return
		}
	}
	t.Errorf("unknowns: got %v; want an entry %s naming %s", inv.Unknowns, field, path)
}

// A module parameter that cannot be read is "?", and the nested check
// says it cannot tell rather than guessing.
func TestUnreadableNestedParam(t *testing.T) {
	t.Parallel()
	root := copyFixture(t, "intel-iommu")
	p := filepath.Join(root, "sys/module/kvm_intel/parameters/nested")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	inv := collect(t, root)
	if v, _ := inv.KVM.param("kvm_intel", "nested"); v != "?" {
		t.Errorf("kvm_intel nested: got %q; want %q", v, "?")
	}
	opts, _ := checkOpts(t, root, &probeFast, 0)
	if c, _ := RunChecks(context.Background(), inv, opts).Check("kvm.nested"); c.Status != Unknown {
		t.Errorf("kvm.nested: got %s (%s); want %s", c.Status, c.Detail, Unknown)
	}
}

// Empty or garbage where a number belongs is unknown, not zero.
func TestGarbageNumberIsUnknown(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		fixture string
		file    string
		content string
		check   func(*Inventory) string // "" when fine, else what is wrong
		field   string                  // Unknowns entry that must name the file; "" for none
	}{
		{"empty nr_hugepages", "intel-iommu", "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "",
			func(inv *Inventory) string { return nilTotal(inv.Hugepages.Pools, 2048) }, "hugepages.pools[2048kB].nr_hugepages"},
		{"word nr_hugepages", "intel-iommu", "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "lots\n",
			func(inv *Inventory) string { return nilTotal(inv.Hugepages.Pools, 1048576) }, "hugepages.pools[1048576kB].nr_hugepages"},
		{"negative nr_hugepages", "intel-iommu", "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "-3\n",
			func(inv *Inventory) string { return nilTotal(inv.NUMA.Nodes[0].Hugepages, 2048) }, "numa.nodes[0].hugepages[2048kB].nr_hugepages"},
		{"garbage mtu", "pvm-build", "sys/class/net/eth0/mtu", "jumbo\n",
			func(inv *Inventory) string {
				if inv.NICs[0].MTU != nil {
					return "eth0 mtu set"
				}
				return ""
			}, "nics[eth0].mtu"},
		{"garbage meminfo", "intel-iommu", "proc/meminfo", ": 5\nMemTotal: lots kB\nnonsense\n\n",
			func(inv *Inventory) string {
				if inv.Memory.TotalBytes != nil {
					return "memory total set"
				}
				return ""
			}, "memory.totalBytes"},
		{"garbage node meminfo", "intel-iommu", "sys/devices/system/node/node1/meminfo", "Node 1 MemTotal: many kB\n",
			func(inv *Inventory) string {
				if inv.NUMA.Nodes[1].MemTotalBytes != nil {
					return "node 1 memTotal set"
				}
				return ""
			}, "numa.nodes[1].memTotalBytes"},
		{"garbage node cpulist", "intel-iommu", "sys/devices/system/node/node1/cpulist", "2-3,x\n",
			func(inv *Inventory) string {
				if inv.NUMA.Nodes[1].CPUs != "" {
					return "node 1 cpus " + inv.NUMA.Nodes[1].CPUs
				}
				return ""
			}, "numa.nodes[1].cpus"},
		{"garbage core_id", "pvm-build", "sys/devices/system/cpu/cpu1/topology/core_id", "x\n",
			func(inv *Inventory) string {
				if inv.CPU.Sockets != nil || inv.CPU.Cores != nil || inv.CPU.Threads != nil {
					return "cpu topology set"
				}
				return ""
			}, "cpu.topology"},
		{"garbage nic speed", "intel-iommu", "sys/class/net/enp23s0f0/speed", "fast\n",
			func(inv *Inventory) string {
				if inv.NICs[1].SpeedMbps != nil {
					return "enp23s0f0 speed set"
				}
				return ""
			}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := copyFixture(t, tc.fixture)
			p := filepath.Join(root, tc.file)
			if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			inv := collect(t, root)
			if bad := tc.check(inv); bad != "" {
				t.Errorf("got %s; want unknown (nil)", bad)
			}
			if tc.field != "" {
				path := p
				if tc.field == "cpu.topology" {
					path = filepath.Join(root, "sys/devices/system/cpu")
				}
				assertUnknown(t, inv, tc.field, path)
			}
			opts, _ := checkOpts(t, root, &probeFast, 0)
			_ = RunChecks(context.Background(), inv, opts) // must not crash
		})
	}
}

func nilTotal(pools []HugepagePool, size uint64) string {
	for _, p := range pools {
		if p.SizeKiB == size {
			if p.Total != nil {
				return fmt.Sprintf("total %d for %dkB", *p.Total, size)
			}
			return ""
		}
	}
	return fmt.Sprintf("no %dkB pool", size)
}

// Sandboxes such as gVisor list empty cpuN directories: ghw then reads -1
// for every package and core id, which must not come out as one socket
// with one core.
func TestEmptyCPUDirsAreUnknownTopology(t *testing.T) {
	t.Parallel()
	root := copyFixture(t, "container")
	for _, c := range []string{"cpu0", "cpu1", "cpu2", "cpu3"} {
		if err := os.Mkdir(filepath.Join(root, "sys/devices/system/cpu", c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inv := collect(t, root)
	if inv.CPU.Sockets != nil || inv.CPU.Cores != nil || inv.CPU.Threads != nil {
		t.Errorf("cpu topology: got sockets %v cores %v threads %v; want all nil", show(inv.CPU.Sockets), show(inv.CPU.Cores), show(inv.CPU.Threads))
	}
	assertUnknown(t, inv, "cpu.topology", filepath.Join(root, "sys/devices/system/cpu"))
}

// A malformed PCI address (no function number) must not crash the
// passthrough check.
func TestPassthroughOddAddress(t *testing.T) {
	t.Parallel()
	inv := &Inventory{
		CPU:  CPUInfo{Flags: []string{"vmx"}},
		PCI:  []PCIDevice{{Address: "bogus", Class: "030000", IOMMUGroup: ptr(3)}, {Address: "other", Class: "020000", IOMMUGroup: ptr(3)}},
		GPUs: []GPU{{Address: "bogus", IOMMUGroup: ptr(3), GroupPeers: []string{"other"}}},
	}
	opts, _ := checkOpts(t, t.TempDir(), nil, 0)
	r := RunChecks(context.Background(), inv, opts)
	if c, ok := r.Check("iommu.passthrough.bogus"); !ok || c.Status != Warn {
		t.Errorf("iommu.passthrough.bogus: got %s (%s); want %s", c.Status, c.Detail, Warn)
	}
}

// Where permissions really hide something from a non-root user, the check
// says it needs root instead of reporting the thing missing. Root reads
// through any mode, so this can only be shown unprivileged.
func TestNeedsRootWhenPermissionDenied(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("running as root: chmod 000 hides nothing from root, so permission errors cannot be produced")
	}
	root := copyFixture(t, "pvm-build")
	for _, d := range []string{"sys/firmware/acpi/tables", "dev/net"} {
		p := filepath.Join(root, d)
		if err := os.Chmod(p, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(p, 0o755) })
	}
	inv := collect(t, root)
	opts, _ := checkOpts(t, root, &probePVMTimeout, os.Geteuid())
	r := RunChecks(context.Background(), inv, opts)
	for _, id := range []string{"iommu.firmware", "dev.tun"} {
		c, _ := r.Check(id)
		if c.Status != Unknown || !strings.Contains(c.Detail, "needs root") {
			t.Errorf("check %s: got %s (%s); want %s needs root", id, c.Status, c.Detail, Unknown)
		}
	}
}
