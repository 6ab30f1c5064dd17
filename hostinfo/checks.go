package hostinfo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"golang.org/x/sys/unix"
)

// Status is the outcome of one check.
type Status string

// The check statuses. UNKNOWN means "could not be determined", which
// virtcon treats as "not available".
const (
	Pass    Status = "PASS"
	Warn    Status = "WARN"
	Fail    Status = "FAIL"
	Unknown Status = "UNKNOWN"
)

// Check is one health check. IDs are stable and documented in docs/checks.md.
type Check struct {
	ID     string `json:"id" yaml:"id"`
	Status Status `json:"status" yaml:"status"`
	Detail string `json:"detail" yaml:"detail"`
	Hint   string `json:"hint,omitempty" yaml:"hint,omitempty"`
}

// Accelerator verdicts.
const (
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
	AccelNone = "none"
)

// Report is what `virt host check` prints.
type Report struct {
	Checks             []Check `json:"checks" yaml:"checks"`
	Acceleration       string  `json:"acceleration" yaml:"acceleration"`
	AccelerationReason string  `json:"accelerationReason" yaml:"accelerationReason"`
	// Probe is the KVM probe's raw result, nil when it did not run.
	Probe *kvmprobe.Result `json:"-" yaml:"-"`
}

func apiCheck(r *Report) Check {
	c, _ := r.Check("kvm.api")
	return c
}

// Failed reports whether any check FAILed.
func (r *Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Check returns the check with the given id.
func (r *Report) Check(id string) (Check, bool) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c, true
		}
	}
	return Check{}, false
}

// ProbeFunc runs the KVM probe against a device.
type ProbeFunc func(ctx context.Context, device string) kvmprobe.Result

// VersionFunc returns the first line of `binary --version`.
type VersionFunc func(ctx context.Context, binary string) (string, error)

// CheckOptions configures RunChecks. Zero values mean "the live machine".
type CheckOptions struct {
	Options
	// Probe runs the real KVM probe. Nil: the child-process probe on a live
	// root, and no probe (UNKNOWN) on any other root.
	Probe ProbeFunc
	// ProbeTimeout bounds the probe (default 3s).
	ProbeTimeout time.Duration
	// QEMUVersion asks a QEMU binary its version. Nil: run it, live roots only.
	QEMUVersion VersionFunc
	// EUID is the effective uid the checks judge access for; nil means os.Geteuid().
	EUID *int
	// LookPath finds a program on PATH (live roots only); nil means exec.LookPath.
	LookPath func(string) (string, error)
}

type checker struct {
	opts CheckOptions
	h    hostFS
	inv  *Inventory
	euid int
}

func (k *checker) needsRoot() bool { return k.euid != 0 }

// RunChecks runs every check against the inventory and returns the report
// with the acceleration verdict. It never fails: what cannot be checked is
// UNKNOWN with the reason.
func RunChecks(ctx context.Context, inv *Inventory, opts CheckOptions) *Report {
	k := &checker{opts: opts, h: opts.fs(), inv: inv, euid: os.Geteuid()}
	if opts.EUID != nil {
		k.euid = *opts.EUID
	}
	r := &Report{}
	add := func(c ...Check) { r.Checks = append(r.Checks, c...) }
	add(k.cpuFlags(), k.kvmModule(), k.kvmDevice())
	probe, probeCheck := k.kvmProbe(ctx)
	r.Probe = probe
	add(k.kvmAPI(probe, probeCheck), probeCheck)
	add(k.hypervisor(), k.nested())
	add(k.iommuFirmware(), k.iommuKernel())
	add(k.passthrough()...)
	add(k.hugepages())
	for _, n := range miscNodes {
		add(k.devNode(n))
	}
	add(k.cgroup(), k.scopes())
	qemu := k.qemu(ctx)
	add(qemu, k.ovmf())

	switch {
	case qemu.Status == Fail:
		r.Acceleration, r.AccelerationReason = AccelNone, "no QEMU binary: "+qemu.Detail
	case probeCheck.Status == Pass && apiCheck(r).Status != Fail:
		r.Acceleration, r.AccelerationReason = AccelKVM, "the KVM probe ran guest code at hardware speed"
	default:
		r.Acceleration, r.AccelerationReason = AccelTCG, "KVM probe "+string(probeCheck.Status)+": "+probeCheck.Detail
	}
	return r
}

func (k *checker) cpuFlags() Check {
	c := Check{ID: "cpu.virt-flags"}
	flags := k.inv.CPU.Flags
	switch {
	case flags == nil:
		c.Status, c.Detail = Unknown, "CPU flags unreadable: "+k.h.path("proc/cpuinfo")
	case hasFlag(flags, "vmx"):
		c.Status, c.Detail = Pass, "vmx present (Intel VT-x)"
	case hasFlag(flags, "svm"):
		c.Status, c.Detail = Pass, "svm present (AMD-V)"
	default:
		c.Status, c.Detail = Fail, "no vmx or svm flag: the CPU offers no hardware virtualisation to this kernel"
		c.Hint = "enable VT-x/AMD-V in the firmware setup; on a cloud or nested VM, enable nested virtualisation on the outer host; until then guests run under TCG (software emulation)"
		if hasFlag(flags, "hypervisor") {
			c.Hint = "this machine is itself a VM: enable nested virtualisation on the outer host; until then guests run under TCG (software emulation)"
		}
	}
	return c
}

func (k *checker) kvmModule() Check {
	c := Check{ID: "kvm.module"}
	hw := hasFlag(k.inv.CPU.Flags, "vmx") || hasFlag(k.inv.CPU.Flags, "svm")
	switch k.inv.KVM.Backend {
	case "kvm_intel", "kvm_amd":
		c.Status, c.Detail = Pass, k.inv.KVM.Backend+" loaded (hardware-assisted KVM)"
	case "kvm_pvm":
		c.Status, c.Detail = Warn, "kvm_pvm loaded: pagetable-based virtualisation (PVM), not VT-x/AMD-V; ordinary guests run far too slowly or hang"
		c.Hint = "use TCG here (virtcon does so automatically when the KVM probe fails), or a host with VT-x/AMD-V and kvm_intel/kvm_amd"
	default:
		c.Status, c.Detail = Fail, "no KVM module loaded (kvm_intel, kvm_amd and kvm_pvm are all absent from "+k.h.path("sys/module")+")"
		c.Hint = "guests run under TCG only"
		if hw {
			c.Hint = "load it: modprobe kvm_intel (Intel) or modprobe kvm_amd (AMD); check dmesg if it refuses (VT-x/AMD-V disabled in firmware)"
		}
	}
	return c
}

func (k *checker) kvmDevice() Check {
	c := Check{ID: "kvm.device"}
	if !k.inv.KVM.DevicePresent {
		c.Status, c.Detail = Fail, k.h.path("dev/kvm")+" does not exist"
		c.Hint = "load the KVM module (modprobe kvm_intel or kvm_amd); in a container, pass --device /dev/kvm"
		return c
	}
	if !k.h.live() {
		c.Status, c.Detail = Pass, k.h.path("dev/kvm")+" exists (not opened: the host root is not the live machine)"
		return c
	}
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		c.Status, c.Detail = Pass, fmt.Sprintf("/dev/kvm opens read-write for uid %d", k.euid)
		return c
	}
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		if k.needsRoot() {
			c.Status, c.Detail = Unknown, fmt.Sprintf("needs root: /dev/kvm is not accessible to uid %d", k.euid)
			c.Hint = "run as root, or add the user to the group owning /dev/kvm (usually kvm)"
			return c
		}
	}
	c.Status, c.Detail = Fail, "open /dev/kvm: "+err.Error()
	c.Hint = "check the device node's mode and that the KVM module is healthy (dmesg)"
	return c
}

// requiredCaps are the KVM extensions QEMU needs on x86.
var requiredCaps = []string{"KVM_CAP_USER_MEMORY", "KVM_CAP_SET_TSS_ADDR", "KVM_CAP_EXT_CPUID"}

func (k *checker) kvmAPI(p *kvmprobe.Result, probe Check) Check {
	c := Check{ID: "kvm.api"}
	if p == nil || p.APIVersion == 0 {
		c.Status = Unknown
		c.Detail = "KVM API not queried: " + probe.Detail
		if p != nil && p.Error != "" {
			c.Detail = "KVM API not queried: " + p.Error
		}
		c.Hint = probe.Hint
		return c
	}
	if p.APIVersion != 12 {
		c.Status, c.Detail = Fail, fmt.Sprintf("KVM API version %d, want 12", p.APIVersion)
		c.Hint = "the kernel's KVM is incompatible with QEMU; update the kernel"
		return c
	}
	var have, missing []string
	for name, ok := range p.Extensions {
		if ok {
			have = append(have, strings.TrimPrefix(name, "KVM_CAP_"))
		}
	}
	for _, name := range requiredCaps {
		if !p.Extensions[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(have)
	c.Status = Pass
	c.Detail = fmt.Sprintf("API version 12, max %d vCPUs; extensions: %s", p.MaxVCPUs, strings.Join(have, " "))
	if len(missing) > 0 {
		c.Status = Fail
		c.Detail = fmt.Sprintf("API version 12 but missing %s", strings.Join(missing, ", "))
		c.Hint = "QEMU cannot use this KVM; use TCG or update the kernel"
	}
	return c
}

const tcgHint = "virtcon runs guests under TCG (software emulation, correct but slow) when --accel is auto; for hardware speed use a host whose CPU exposes VT-x/AMD-V with kvm_intel/kvm_amd loaded"

func (k *checker) kvmProbe(ctx context.Context) (*kvmprobe.Result, Check) {
	c := Check{ID: "kvm.probe"}
	if !k.inv.KVM.DevicePresent {
		c.Status, c.Detail, c.Hint = Fail, "not run: no /dev/kvm", tcgHint
		return nil, c
	}
	probe := k.opts.Probe
	if probe == nil {
		if !k.h.live() {
			c.Status, c.Detail = Unknown, "not run: the probe runs guest code only on the live machine, and the host root is "+k.h.root
			return nil, c
		}
		if k.needsRoot() && unix.Access("/dev/kvm", unix.R_OK|unix.W_OK) != nil {
			c.Status, c.Detail = Unknown, fmt.Sprintf("needs root: /dev/kvm is not accessible to uid %d", k.euid)
			c.Hint = "run `virt host check` as root (or as a member of the kvm group)"
			return nil, c
		}
		timeout := k.opts.ProbeTimeout
		if timeout == 0 {
			timeout = 3 * time.Second
		}
		probe = func(ctx context.Context, dev string) kvmprobe.Result {
			return kvmprobe.Run(ctx, kvmprobe.Options{Device: dev, Timeout: timeout, Logger: k.opts.logger()})
		}
	}
	res := probe(ctx, k.h.path("dev/kvm"))
	ok, reason := res.Verdict()
	if ok {
		c.Status, c.Detail = Pass, reason
		return &res, c
	}
	c.Status, c.Detail, c.Hint = Fail, reason, tcgHint
	return &res, c
}

func (k *checker) hypervisor() Check {
	c := Check{ID: "host.hypervisor"}
	switch {
	case k.inv.CPU.Flags == nil:
		c.Status, c.Detail = Unknown, "CPU flags unreadable"
	case hasFlag(k.inv.CPU.Flags, "hypervisor"):
		c.Status = Warn
		who := k.inv.CPU.Hypervisor
		if who == "" {
			who = "vendor not reported"
		}
		c.Detail = "running under a hypervisor (" + who + "): KVM here is nested"
		c.Hint = "nested guests are slower and need nested virtualisation on the outer host; prefer bare metal for production"
	default:
		c.Status, c.Detail = Pass, "bare metal (no hypervisor CPU flag)"
	}
	return c
}

func (k *checker) nested() Check {
	c := Check{ID: "kvm.nested"}
	mod := k.inv.KVM.Backend
	if mod != "kvm_intel" && mod != "kvm_amd" {
		c.Status, c.Detail = Unknown, "no nested parameter: backend is "+mod
		return c
	}
	v, ok := k.inv.KVM.param(mod, "nested")
	switch {
	case !ok || v == "?":
		c.Status, c.Detail = Unknown, "cannot read "+k.h.path("sys/module/"+mod+"/parameters/nested")
	case v == "Y" || v == "1":
		c.Status, c.Detail = Pass, mod+" nested="+v+": guests may run their own hypervisor"
	default:
		c.Status, c.Detail = Warn, mod+" nested="+v+": guests cannot run their own hypervisor"
		c.Hint = fmt.Sprintf("echo 'options %s nested=1' > /etc/modprobe.d/kvm-nested.conf, then reload %s with no VM running", mod, mod)
	}
	return c
}

func (k *checker) iommuFirmware() Check {
	c := Check{ID: "iommu.firmware"}
	switch t := k.inv.IOMMU.FirmwareTable; {
	case t == "DMAR":
		c.Status, c.Detail = Pass, "ACPI DMAR table present (Intel VT-d)"
	case t == "IVRS":
		c.Status, c.Detail = Pass, "ACPI IVRS table present (AMD-Vi)"
	default:
		tables := "sys/firmware/acpi/tables"
		if _, err := os.ReadDir(k.h.path(tables)); err != nil {
			if isPermission(err) && k.needsRoot() {
				c.Status, c.Detail = Unknown, "needs root: cannot list "+k.h.path(tables)
			} else {
				c.Status, c.Detail = Unknown, "cannot list ACPI tables: "+err.Error()
			}
			return c
		}
		c.Status, c.Detail = Warn, "no DMAR or IVRS ACPI table: the firmware offers no IOMMU, so PCI passthrough is impossible"
		c.Hint = "enable VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the firmware setup"
	}
	return c
}

func (k *checker) iommuKernel() Check {
	c := Check{ID: "iommu.kernel"}
	n := len(k.inv.IOMMU.Groups)
	cmd := strings.Join(k.inv.IOMMU.Cmdline, " ")
	if n > 0 {
		c.Status = Pass
		c.Detail = fmt.Sprintf("%d IOMMU groups", n)
		if len(k.inv.IOMMU.Units) > 0 {
			c.Detail += ", units " + strings.Join(k.inv.IOMMU.Units, " ")
		}
		if cmd != "" {
			c.Detail += "; cmdline " + cmd
		}
		return c
	}
	c.Status = Warn
	c.Detail = "no IOMMU groups in " + k.h.path("sys/kernel/iommu_groups")
	switch {
	case len(offArgs(k.inv.IOMMU.Cmdline)) > 0:
		off := strings.Join(offArgs(k.inv.IOMMU.Cmdline), " ")
		c.Detail += " (the kernel command line has " + off + ")"
		c.Hint = "remove " + off + " from the kernel command line and reboot"
	case k.inv.IOMMU.FirmwareTable == "DMAR":
		c.Hint = "add intel_iommu=on iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX) and reboot"
	case k.inv.IOMMU.FirmwareTable == "IVRS":
		c.Hint = "the firmware has an IOMMU but the kernel did not enable it: check dmesg for AMD-Vi, add amd_iommu=on iommu=pt and reboot"
	default:
		c.Hint = "enable the IOMMU in firmware first (see iommu.firmware)"
	}
	return c
}

// offArgs returns the kernel arguments that turn the IOMMU off.
func offArgs(cmdline []string) []string {
	var out []string
	for _, a := range cmdline {
		if a == "amd_iommu=off" || a == "intel_iommu=off" || a == "iommu=off" {
			out = append(out, a)
		}
	}
	return out
}

// passthrough judges each GPU's IOMMU group: passthrough takes a whole
// group, so other devices in it (bridges aside) must go along.
func (k *checker) passthrough() []Check {
	byAddr := map[string]PCIDevice{}
	for _, d := range k.inv.PCI {
		byAddr[d.Address] = d
	}
	var out []Check
	ready := 0
	for _, g := range k.inv.GPUs {
		c := Check{ID: "iommu.passthrough." + g.Address}
		name := strings.TrimSpace(g.Vendor + " " + g.Product)
		if name == "" {
			name = "GPU"
		}
		if g.IOMMUGroup == nil {
			c.Status, c.Detail = Warn, name+": no IOMMU group"
			c.Hint = "enable the IOMMU (see iommu.kernel)"
			out = append(out, c)
			continue
		}
		slot := g.Address // dddd:bb:dd without the .function
		if i := strings.LastIndex(slot, "."); i >= 0 {
			slot = slot[:i]
		}
		var sameSlot, others []string
		for _, p := range g.GroupPeers {
			switch {
			case strings.HasPrefix(p, slot+"."):
				sameSlot = append(sameSlot, p)
			case strings.HasPrefix(byAddr[p].Class, "06"):
				// bridges stay with the host; vfio does not need them
			default:
				others = append(others, p)
			}
		}
		if len(others) > 0 {
			c.Status = Warn
			c.Detail = fmt.Sprintf("%s: IOMMU group %d is shared with %s", name, *g.IOMMUGroup, strings.Join(others, ", "))
			c.Hint = "every device in the group must be passed through together; move the card to another slot or use a board with ACS"
		} else {
			ready++
			c.Status = Pass
			c.Detail = fmt.Sprintf("%s: IOMMU group %d holds only this card", name, *g.IOMMUGroup)
			if len(sameSlot) > 0 {
				c.Detail += " (with its functions " + strings.Join(sameSlot, ", ") + ", passed through together)"
			}
		}
		out = append(out, c)
	}
	sum := Check{ID: "iommu.passthrough"}
	switch {
	case len(k.inv.GPUs) == 0:
		sum.Status, sum.Detail = Pass, "no GPUs to pass through"
	case ready == len(k.inv.GPUs):
		sum.Status, sum.Detail = Pass, fmt.Sprintf("%d of %d GPUs ready for passthrough", ready, len(k.inv.GPUs))
	default:
		sum.Status, sum.Detail = Warn, fmt.Sprintf("%d of %d GPUs ready for passthrough", ready, len(k.inv.GPUs))
		sum.Hint = "see the iommu.passthrough.<address> checks"
	}
	return append([]Check{sum}, out...)
}

func (k *checker) hugepages() Check {
	c := Check{ID: "hugepages"}
	hp := k.inv.Hugepages
	if hp.Pools == nil {
		c.Status, c.Detail = Unknown, "hugepage pools unreadable under "+k.h.path("sys/kernel/mm/hugepages")
		return c
	}
	var parts []string
	var reserved bool
	for _, p := range hp.Pools {
		if p.Total == nil {
			parts = append(parts, fmt.Sprintf("%s: unknown", sizeName(p.SizeKiB)))
			continue
		}
		free := "?"
		if p.Free != nil {
			free = fmt.Sprint(*p.Free)
		}
		parts = append(parts, fmt.Sprintf("%s: %d (%s free)", sizeName(p.SizeKiB), *p.Total, free))
		if *p.Total > 0 {
			reserved = true
		}
	}
	if len(parts) == 0 {
		c.Status, c.Detail = Warn, "the kernel offers no hugepage sizes"
		c.Hint = "build the kernel with CONFIG_HUGETLBFS"
		return c
	}
	c.Detail = strings.Join(parts, ", ")
	if hp.THP != "" {
		c.Detail += "; THP " + hp.THP
	}
	switch {
	case !reserved:
		c.Status = Warn
		c.Detail = "no hugepages reserved: " + c.Detail
		c.Hint = "reserve some for big guests: echo N > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages, or hugepagesz=1G hugepages=N on the kernel command line"
	case len(hp.Mounts) == 0:
		c.Status = Warn
		c.Detail += "; no hugetlbfs mounted"
		c.Hint = "mount -t hugetlbfs none /dev/hugepages"
	default:
		c.Status = Pass
	}
	return c
}

func sizeName(kib uint64) string {
	switch {
	case kib >= 1024*1024 && kib%(1024*1024) == 0:
		return fmt.Sprintf("%dG", kib/(1024*1024))
	case kib >= 1024 && kib%1024 == 0:
		return fmt.Sprintf("%dM", kib/1024)
	}
	return fmt.Sprintf("%dK", kib)
}

func (k *checker) cgroup() Check {
	c := Check{ID: "cgroup.v2"}
	mounts, err := k.h.readString("proc/mounts")
	if err != nil {
		c.Status, c.Detail = Unknown, "cannot read mounts: "+err.Error()
		return c
	}
	var mnt string
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "cgroup2" {
			mnt = f[1]
			if mnt == "/sys/fs/cgroup" {
				break
			}
		}
	}
	if mnt == "" {
		c.Status, c.Detail = Warn, "no cgroup v2 hierarchy mounted"
		c.Hint = "boot with systemd.unified_cgroup_hierarchy=1 (or mount -t cgroup2 none /sys/fs/cgroup) to limit VM CPU and memory"
		return c
	}
	ctrl, err := k.h.readString(filepath.Join(strings.TrimPrefix(mnt, "/"), "cgroup.controllers"))
	if err != nil {
		c.Status, c.Detail = Unknown, "cgroup v2 at "+mnt+" but its controllers are unreadable: "+err.Error()
		return c
	}
	have := strings.Fields(ctrl)
	var missing []string
	for _, want := range []string{"cpu", "memory", "io", "pids"} {
		if !hasFlag(have, want) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		c.Status = Warn
		c.Detail = fmt.Sprintf("cgroup v2 at %s lacks controllers %s (has: %s)", mnt, strings.Join(missing, " "), strings.Join(have, " "))
		if mnt != "/sys/fs/cgroup" {
			c.Detail += "; a hybrid v1/v2 hierarchy"
		}
		c.Hint = "use the unified hierarchy (systemd.unified_cgroup_hierarchy=1) so VM resource limits work"
		return c
	}
	c.Status, c.Detail = Pass, "cgroup v2 at "+mnt+" with "+strings.Join(have, " ")
	return c
}

// scopes says whether VMs get their own systemd scope (package systemd):
// only where systemd is PID 1 (sd_booted's run/systemd/system) and its
// manager can be reached. It reads; it dials nothing.
func (k *checker) scopes() Check {
	c := Check{ID: "vm.scopes"}
	if !k.h.exists("run/systemd/system") {
		c.Status = Warn
		c.Detail = "per-VM scopes unavailable: systemd is not PID 1 (no /run/systemd/system); each VM is a detached QEMU in the cgroup of whatever started it"
		c.Hint = "on a host booted with systemd, each VM runs in its own scope under virtcon.slice, and virtcon-guests.service shuts the guests down before systemd stops them"
		return c
	}
	for _, sock := range []string{"run/systemd/private", "run/dbus/system_bus_socket"} {
		if k.h.exists(sock) {
			c.Status = Pass
			c.Detail = "systemd is PID 1 (manager at /" + sock + "): each VM runs in its own scope virtcon-vm-<uid>.scope under virtcon.slice"
			return c
		}
	}
	c.Status = Fail
	c.Detail = "systemd is PID 1 but neither /run/systemd/private nor the system bus is there: VM starts are refused (a VM outside its own scope dies with the unit that started it)"
	c.Hint = "check systemd's health (systemctl status; systemctl daemon-reexec)"
	return c
}

var qemuCandidates = []string{"usr/bin/qemu-system-x86_64", "usr/local/bin/qemu-system-x86_64", "usr/libexec/qemu-kvm"}

var qemuVersionRE = regexp.MustCompile(`version ([0-9]+\.[0-9]+(\.[0-9]+)?)`)

func (k *checker) qemu(ctx context.Context) Check {
	c := Check{ID: "qemu.binary"}
	var bin string
	if k.h.live() {
		look := k.opts.LookPath
		if look == nil {
			look = exec.LookPath
		}
		if p, err := look("qemu-system-x86_64"); err == nil {
			bin = p
		}
	}
	for _, cand := range qemuCandidates {
		if bin != "" {
			break
		}
		if k.h.exists(cand) {
			bin = k.h.path(cand)
		}
	}
	if bin == "" {
		c.Status, c.Detail = Fail, "qemu-system-x86_64 not found"
		c.Hint = "apt-get install qemu-system-x86 qemu-utils"
		return c
	}
	ver := k.opts.QEMUVersion
	if ver == nil {
		if !k.h.live() {
			c.Status, c.Detail = Pass, bin+" (version not asked: binaries under a non-live root are never run)"
			return c
		}
		ver = runVersion
	}
	out, err := ver(ctx, bin)
	if err != nil {
		c.Status, c.Detail = Fail, bin+" --version: "+err.Error()
		c.Hint = "reinstall qemu-system-x86"
		return c
	}
	m := qemuVersionRE.FindStringSubmatch(out)
	if m == nil {
		c.Status, c.Detail = Warn, fmt.Sprintf("%s: unrecognised version %q", bin, out)
		return c
	}
	c.Status, c.Detail = Pass, bin+" version "+m[1]
	return c
}

func runVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

var ovmfCandidates = []string{
	"usr/share/OVMF/OVMF_CODE_4M.fd", "usr/share/OVMF/OVMF_CODE.fd", "usr/share/qemu/OVMF.fd",
	"usr/share/edk2/ovmf/OVMF_CODE.fd", "usr/share/edk2/x64/OVMF_CODE.fd", "usr/share/edk2-ovmf/x64/OVMF_CODE.fd",
}

// OVMFPaths returns the OVMF firmware files present under root.
func OVMFPaths(root string) []string {
	h := hostFS{root: root}
	var out []string
	for _, cand := range ovmfCandidates {
		if h.exists(cand) {
			out = append(out, h.path(cand))
		}
	}
	return out
}

func (k *checker) ovmf() Check {
	c := Check{ID: "firmware.ovmf"}
	found := OVMFPaths(k.h.root)
	if len(found) == 0 {
		c.Status, c.Detail = Warn, "no OVMF (UEFI) firmware found: UEFI guests cannot boot, BIOS guests can"
		c.Hint = "apt-get install ovmf"
		return c
	}
	c.Status, c.Detail = Pass, strings.Join(found, ", ")
	return c
}
