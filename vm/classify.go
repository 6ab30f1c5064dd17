package vm

import (
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virtcon/virtcon/qmp"
)

// Classes of what is found on the host.
const (
	ClassManaged  = "MANAGED"  // ours, as the spec says
	ClassMissing  = "MISSING"  // spec says running, process gone
	ClassOrphaned = "ORPHANED" // our leftovers without a spec: listed, never auto-deleted
	ClassExternal = "EXTERNAL" // QEMU or libvirt guests that are not ours: listed, never touched
	// ClassUnreadable is ours, but its spec cannot be read: listed with
	// the problem, and nothing acts on it until the spec is repaired.
	ClassUnreadable = "UNREADABLE"
)

// listQMPTimeout bounds the status query per running VM in a listing.
const listQMPTimeout = time.Second

// List classifies everything on the host: our VMs with their live phase,
// our orphans, and external guests. It fails closed: a store that cannot
// be listed is an error (nothing could be told apart from an orphan), and
// a spec that cannot be read is an UNREADABLE row of its own, returned
// with an error naming it, never an orphan.
func (m *Manager) List(ctx context.Context) ([]Entry, error) {
	vms, errs := m.store.list()
	var unreadable []*SpecError
	for _, err := range errs {
		var se *SpecError
		if !errors.As(err, &se) {
			return nil, err
		}
		unreadable = append(unreadable, se)
	}
	procs := m.proc.scanQEMU()
	byUID := map[string]qemuProcess{}
	for _, p := range procs {
		if u, ok := argValue(p.Argv, "-uuid"); ok {
			byUID[strings.ToLower(u)] = p
		}
	}
	out := make([]Entry, len(vms), len(vms)+len(unreadable))
	for i, vm := range vms {
		out[i] = m.entryFor(vm)
	}
	ours := map[string]bool{}
	for _, vm := range vms {
		ours[vm.Metadata.UID] = true
	}
	for _, se := range unreadable {
		ours[se.UID] = true
		e := Entry{UID: se.UID, Class: ClassUnreadable, Phase: PhaseUnknown,
			Message: "spec unreadable: " + se.Error() + " (repair or restore it; nothing acts on this VM until then)"}
		if p, ok := byUID[se.UID]; ok {
			e.Name = qemuName(p.Argv)
		}
		out = append(out, e)
	}
	var wg sync.WaitGroup
	for i := range out {
		// one /proc scan serves every VM: a QEMU carrying the UUID is the
		// VM's process, whatever its pidfile says
		p, ok := byUID[out[i].UID]
		if !ok {
			continue
		}
		wg.Add(1)
		go func(e *Entry, p qemuProcess) {
			defer wg.Done()
			m.observeLive(ctx, e, p)
		}(&out[i], p)
	}
	wg.Wait()
	out = append(out, m.notOurs(procs, ours)...)
	for _, o := range m.orphans(ours, vms, byUID) {
		out = append(out, Entry{UID: o.UID, Class: ClassOrphaned, Phase: PhaseStopped, Path: o.Path, Message: o.What + ": " + o.Path})
	}
	if len(unreadable) > 0 {
		return out, errors.Join(errs...)
	}
	return out, nil
}

// notOurs lists the QEMU processes and libvirt domains that are not ours:
// live ORPHANED QEMUs started by virtcon whose spec is gone, and EXTERNAL
// guests. It asks no QMP socket.
func (m *Manager) notOurs(procs []qemuProcess, ours map[string]bool) []Entry {
	var out []Entry
	runRoot := m.layout().RunDir()
	seenExternal := map[string]bool{}
	for _, p := range procs {
		u, _ := argValue(p.Argv, "-uuid")
		u = strings.ToLower(u)
		if ours[u] {
			continue
		}
		e := Entry{Name: qemuName(p.Argv), UID: u, Phase: PhaseRunning, PID: p.PID, Accel: argAccel(p.Argv)}
		e.CPUs, e.MemoryMiB = argCPUs(p.Argv), argMemoryMiB(p.Argv)
		if pf, _ := argValue(p.Argv, "-pidfile"); strings.HasPrefix(pf, runRoot+"/vms/") {
			e.Class = ClassOrphaned
			e.Message = "a virtcon QEMU without a spec: inspect, then kill it by pid if unwanted (gc never kills processes)"
			out = append(out, e)
			continue
		}
		e.Class, e.Source = ClassExternal, "qemu"
		if strings.Contains(strings.Join(p.Argv, " "), "libvirt") {
			e.Source = "libvirt"
		}
		e.Message = "not managed by virtcon: listed read-only"
		seenExternal[u] = true
		out = append(out, e)
	}
	for _, d := range m.libvirtDomains() {
		if !seenExternal[d.UID] && !ours[d.UID] {
			out = append(out, Entry{Name: d.Name, UID: d.UID, Class: ClassExternal, Phase: PhaseStopped, Source: "libvirt",
				CPUs: d.VCPUs, MemoryMiB: d.memoryMiB(), Message: "libvirt domain: listed read-only"})
		}
	}
	return out
}

func (m *Manager) entryFor(vm *VirtualMachine) Entry {
	e := Entry{
		Name: vm.Metadata.Name, UID: vm.Metadata.UID, Class: ClassManaged, Phase: PhaseStopped,
		CPUs: vm.Spec.CPUs, MemoryMiB: vm.Spec.MemoryMiB,
		Generation: vm.Metadata.Generation, ObservedGeneration: vm.Status.ObservedGeneration,
		DirectorGeneration: vm.Metadata.Labels[LabelDirectorGeneration], Accel: vm.Status.Accel, AccelReason: vm.Status.AccelReason,
		Autostart: vm.Spec.Autostart, StartupOrder: vm.Spec.StartupOrder(), StartupDelay: vm.Spec.StartupDelay(),
	}
	if vm.Status.StartedAt != nil {
		e.StartedAt = *vm.Status.StartedAt
	}
	e.SpecRunning = vm.Spec.Running
	if vm.Spec.Running {
		e.Class = ClassMissing
		e.Reason, e.Message = ReasonProcessGone, "spec says running but the QEMU process is gone"
	}
	m.markSaved(vm, &e)
	return e
}

// observeLive fills the phase of a live VM from QMP, falling back to the
// process state when QMP does not answer. An UNREADABLE VM keeps its class
// and message: its process is real, its spec is still unreadable.
func (m *Manager) observeLive(ctx context.Context, e *Entry, p qemuProcess) {
	pid := p.PID
	e.PID = pid
	// an UNREADABLE row keeps its message (the spec and what to do) and
	// gets the process's trouble added
	set := func(phase, msg string) {
		e.Phase = phase
		if e.Class == ClassUnreadable {
			e.Message += "; " + msg
		} else {
			e.Message = msg
		}
	}
	if e.Class != ClassUnreadable {
		// a live process is neither MISSING nor Saved
		e.Class, e.Reason, e.Message = ClassManaged, "", ""
	} else {
		e.CPUs, e.MemoryMiB = argCPUs(p.Argv), argMemoryMiB(p.Argv)
	}
	e.Accel = argAccel(p.Argv)
	if st, err := m.proc.state(pid); err == nil && st == "T" {
		set(PhaseUnresponsive, "the QEMU process is stopped (SIGSTOP)")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, listQMPTimeout)
	defer cancel()
	mon, err := m.dialQMP(ctx, e.UID)
	if err != nil {
		if errors.Is(err, qmp.ErrBusy) {
			set(PhaseRunning, "QMP busy: another virtcon command holds it")
			return
		}
		set(PhaseUnresponsive, "QMP: "+err.Error())
		return
	}
	defer mon.Close()
	st, err := mon.Status(ctx)
	if err != nil {
		set(PhaseUnresponsive, "QMP query-status: "+err.Error())
		return
	}
	e.Phase = phaseFromQMP(st.Status)
	if note := m.leftoverNote(e.UID); note != "" {
		set(e.Phase, note)
	}
	if note := m.interruptedSaveNote(e.UID); note != "" {
		set(e.Phase, note)
	}
}

// argTAPs lists the TAP devices of QEMU's -netdev tap,ifname=... options.
func argTAPs(argv []string) []string {
	var out []string
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] != "-netdev" {
			continue
		}
		parts := splitOpts(argv[i+1])
		if len(parts) == 0 || parts[0] != "tap" {
			continue
		}
		for _, p := range parts[1:] {
			if n, ok := strings.CutPrefix(p, "ifname="); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

func argAccel(argv []string) string {
	if v, ok := argValue(argv, "-accel"); ok {
		a, _, _ := strings.Cut(v, ",")
		return a
	}
	if v, ok := argValue(argv, "-machine"); ok && strings.Contains(v, "accel=kvm") {
		return "kvm"
	}
	for _, a := range argv {
		if a == "-enable-kvm" {
			return "kvm"
		}
	}
	return "tcg"
}

// qemuName reads -name guest=X,... or -name X; "" when QEMU has none.
func qemuName(argv []string) string {
	v, ok := argValue(argv, "-name")
	if !ok {
		return ""
	}
	for _, part := range splitOpts(v) {
		if n, ok := strings.CutPrefix(part, "guest="); ok {
			return n
		}
	}
	// QEMU reads a first element with no '=' before its first comma as the
	// implied guest=, even when its escaped commas hide an '=' later on.
	if i := strings.IndexAny(v, "=,"); i < 0 || v[i] == ',' {
		return splitOpts(v)[0]
	}
	return ""
}

// splitOpts splits a QemuOpts string on single commas (",," is a comma).
func splitOpts(s string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			if i+1 < len(s) && s[i+1] == ',' {
				cur.WriteByte(',')
				i++
				continue
			}
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(s[i])
	}
	return append(out, cur.String())
}

type libvirtDomain struct {
	Name   string `xml:"name"`
	UID    string `xml:"uuid"`
	VCPUs  int    `xml:"vcpu"`
	Memory struct {
		Value int64  `xml:",chardata"`
		Unit  string `xml:"unit,attr"`
	} `xml:"memory"`
}

// memoryMiB converts libvirt's <memory unit=...> (KiB by default); 0 when
// it cannot be read.
func (d libvirtDomain) memoryMiB() int {
	// libvirt's units: k, M, G, T are powers of 1024, KB, MB, GB, TB powers of 1000
	mult := map[string]int64{"": 1 << 10, "b": 1, "bytes": 1, "k": 1 << 10, "KiB": 1 << 10, "KB": 1e3,
		"M": 1 << 20, "MiB": 1 << 20, "MB": 1e6, "G": 1 << 30, "GiB": 1 << 30, "GB": 1e9,
		"T": 1 << 40, "TiB": 1 << 40, "TB": 1e12}[d.Memory.Unit]
	if mult == 0 || d.Memory.Value <= 0 {
		return 0
	}
	return int(d.Memory.Value * mult >> 20)
}

// argCPUs reads the vCPU count from QEMU's -smp (N, cpus=N, or the product
// of sockets, dies, clusters, cores and threads); 1 without -smp, as QEMU
// defaults; 0 when it cannot be read.
func argCPUs(argv []string) int {
	v, ok := argValue(argv, "-smp")
	if !ok {
		return 1
	}
	prod, topo := 1, false
	for i, part := range splitOpts(v) {
		k, val, hasEq := strings.Cut(part, "=")
		if !hasEq {
			if i == 0 {
				k, val = "cpus", part
			} else {
				return 0
			}
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			if k == "cpus" || k == "sockets" || k == "dies" || k == "clusters" || k == "cores" || k == "threads" {
				return 0
			}
			continue
		}
		switch k {
		case "cpus":
			if n > 0 {
				return n
			}
		case "sockets", "dies", "clusters", "cores", "threads":
			prod *= n
			topo = true
		}
	}
	if topo && prod > 0 {
		return prod
	}
	return 0
}

// argMemoryMiB reads QEMU's -m (MiB by default, or with a suffix, or
// size=...); 128 without -m, as QEMU defaults; 0 when it cannot be read.
func argMemoryMiB(argv []string) int {
	v, ok := argValue(argv, "-m")
	if !ok {
		return 128
	}
	for i, part := range splitOpts(v) {
		k, val, hasEq := strings.Cut(part, "=")
		if !hasEq && i == 0 {
			k, val = "size", part
		}
		if k != "size" {
			continue
		}
		if n, err := strconv.Atoi(val); err == nil {
			return n
		}
		if b, err := ParseSize(val); err == nil {
			return int(b >> 20)
		}
		return 0
	}
	return 0
}

// libvirtDomains reads the defined libvirt domains (read-only).
func (m *Manager) libvirtDomains() []libvirtDomain {
	files, _ := filepath.Glob(filepath.Join(m.opts.HostRoot, "etc/libvirt/qemu/*.xml"))
	var out []libvirtDomain
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var d libvirtDomain
		if xml.Unmarshal(b, &d) == nil && d.Name != "" {
			d.UID = strings.ToLower(d.UID)
			out = append(out, d)
		}
	}
	return out
}

// tapPrefix marks an orphan that is a network device, not a path.
const tapPrefix = "tap:"

// Orphan is one of our leftovers without a spec, or work an interrupted
// operation left in a running VM's QEMU (Path qemuWorkPrefix...).
type Orphan struct {
	UID  string `json:"uid" yaml:"uid"`
	What string `json:"what" yaml:"what"`
	Path string `json:"path" yaml:"path"`
	// Kept says why gc leaves it (a file a running QEMU holds open);
	// empty for what gc removes.
	Kept string `json:"kept,omitempty" yaml:"kept,omitempty"`
	// Fix is what gc does instead of removing it (a file a linked clone
	// cut short left in use: a mode or a name put right).
	Fix string `json:"fix,omitempty" yaml:"fix,omitempty"`
	// done: gc has already dealt with it (under the VM's lock)
	done bool
}

// qemuWorkPrefix marks an orphan that is a job or block node in a QEMU
// (qemu:UID/job/ID, qemu:UID/node/NAME): gc cancels it.
const qemuWorkPrefix = "qemu:"

// InQEMU reports whether the orphan is work in a running QEMU (gc
// cancels it) rather than a file or device (gc removes it).
func (o Orphan) InQEMU() bool { return strings.HasPrefix(o.Path, qemuWorkPrefix) }

// orphans lists our leftovers. ours holds the UID of every VM whose spec
// exists, readable or not: an unreadable VM's disks are not orphans.
func (m *Manager) orphans(ours map[string]bool, vms []*VirtualMachine, live map[string]qemuProcess) []Orphan {
	var out []Orphan
	l := m.layout()
	layers := m.layerDirsInUse() // frozen layers that linked clones read (clone.go)
	for _, c := range []struct {
		dir, what string
		layers    bool
	}{
		{filepath.Join(l.StateDir(), "vms"), "volumes without a VM spec", true},
		{filepath.Join(l.RunDir(), "vms"), "runtime leftovers without a VM spec", false},
		{filepath.Join(l.LogDir(), "vms"), "logs of a deleted VM", false},
	} {
		ents, _ := os.ReadDir(c.dir)
		for _, e := range ents {
			if !e.IsDir() || ours[e.Name()] || (c.layers && layers[e.Name()]) {
				continue
			}
			if _, alive := live[e.Name()]; alive {
				continue // reported as a live orphan process instead
			}
			out = append(out, Orphan{UID: e.Name(), What: c.what, Path: filepath.Join(c.dir, e.Name())})
		}
	}
	if taps, err := m.opts.Net.ListTAPs(context.Background()); err == nil {
		inUse := map[string]bool{}
		for _, vm := range vms {
			if _, alive := live[vm.Metadata.UID]; alive {
				for i := range vm.Spec.Network {
					inUse[m.opts.Net.TAPName(vm.Metadata.UID, i)] = true
				}
			}
		}
		// a live QEMU of ours names its TAPs on its command line, which
		// also covers a VM whose spec cannot be read
		for uid, p := range live {
			if ours[uid] {
				for _, t := range argTAPs(p.Argv) {
					inUse[t] = true
				}
			}
		}
		for _, t := range taps {
			if !inUse[t] {
				out = append(out, Orphan{What: "TAP device of no running VM", Path: tapPrefix + t})
			}
		}
	}
	parts, _ := filepath.Glob(filepath.Join(l.ImagesDir(), ".*.partial"))
	for _, p := range parts {
		out = append(out, Orphan{What: "interrupted image download", Path: p})
	}
	imgs, _ := filepath.Glob(filepath.Join(l.ImagesDir(), "*.img"))
	for _, p := range imgs {
		if _, err := os.Stat(p + ".sha256"); err != nil {
			out = append(out, Orphan{What: "image without a marker (incomplete)", Path: p})
		}
	}
	m.keepOpenFiles(out)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// GC lists (dryRun) or removes our orphaned files. It never touches a live
// process or anything that is not ours.
func (m *Manager) GC(ctx context.Context, dryRun bool) ([]Orphan, error) {
	g, err := m.store.lockGlobal(ctx)
	if err != nil {
		return nil, err
	}
	defer g.Release()
	vms, errs := m.store.list()
	if len(errs) > 0 {
		return nil, errors.Join(append([]error{errors.New("gc: refusing to run while some specs are unreadable")}, errs...)...)
	}
	live := map[string]qemuProcess{}
	for _, p := range m.proc.scanQEMU() {
		if u, ok := argValue(p.Argv, "-uuid"); ok {
			live[strings.ToLower(u)] = p
		}
	}
	ours := map[string]bool{}
	for _, vm := range vms {
		ours[vm.Metadata.UID] = true
	}
	// what interrupted clones left in running QEMUs goes first: a
	// clone's directory is free to remove once its target node is gone
	orphans, workErr := m.leftoverWork(ctx, vms, live, dryRun)
	orphans = append(orphans, m.orphans(ours, vms, live)...)
	if orphans == nil {
		orphans = []Orphan{}
	}
	if dryRun {
		return orphans, workErr
	}
	rmErrs := []error{workErr}
	for _, o := range orphans {
		if o.Kept != "" || o.InQEMU() || o.done {
			continue
		}
		if tap, ok := strings.CutPrefix(o.Path, tapPrefix); ok {
			if err := m.opts.Net.DeleteTAP(ctx, tap); err != nil {
				rmErrs = append(rmErrs, err)
			}
			continue
		}
		if err := os.RemoveAll(o.Path); err != nil {
			rmErrs = append(rmErrs, err)
		}
	}
	return orphans, errors.Join(rmErrs...)
}
