package vm

import (
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"sort"
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
)

// Entry is one line of `virt vm list`.
type Entry struct {
	Name               string `json:"name" yaml:"name"`
	UID                string `json:"uid" yaml:"uid"`
	Class              string `json:"class" yaml:"class"`
	Phase              string `json:"phase" yaml:"phase"`
	Accel              string `json:"accel" yaml:"accel"`
	AccelReason        string `json:"accelReason,omitempty" yaml:"accelReason,omitempty"`
	PID                int    `json:"pid" yaml:"pid"`
	CPUs               int    `json:"cpus" yaml:"cpus"`
	MemoryMiB          int    `json:"memoryMiB" yaml:"memoryMiB"`
	Generation         int64  `json:"generation" yaml:"generation"`
	ObservedGeneration int64  `json:"observedGeneration" yaml:"observedGeneration"`
	Source             string `json:"source,omitempty" yaml:"source,omitempty"` // external: qemu or libvirt
	Message            string `json:"message,omitempty" yaml:"message,omitempty"`
}

// listQMPTimeout bounds the status query per running VM in a listing.
const listQMPTimeout = time.Second

// List classifies everything on the host: our VMs with their live phase,
// our orphans, and external guests.
func (m *Manager) List(ctx context.Context) ([]Entry, error) {
	vms, errs := m.store.list()
	procs := m.proc.scanQEMU()
	byUID := map[string]qemuProcess{}
	for _, p := range procs {
		if u, ok := argValue(p.Argv, "-uuid"); ok {
			byUID[strings.ToLower(u)] = p
		}
	}
	out := make([]Entry, len(vms))
	var wg sync.WaitGroup
	for i, vm := range vms {
		out[i] = m.entryFor(vm)
		// one /proc scan serves every VM: a QEMU carrying the UUID is the
		// VM's process, whatever its pidfile says
		pid := 0
		if p, ok := byUID[vm.Metadata.UID]; ok {
			pid = p.PID
		}
		if pid == 0 {
			continue
		}
		wg.Add(1)
		go func(e *Entry, pid int) {
			defer wg.Done()
			m.observeLive(ctx, e, pid)
		}(&out[i], pid)
	}
	wg.Wait()
	ours := map[string]bool{}
	for _, vm := range vms {
		ours[vm.Metadata.UID] = true
	}
	runRoot := m.layout().RunDir()
	seenExternal := map[string]bool{}
	for _, p := range procs {
		u, _ := argValue(p.Argv, "-uuid")
		u = strings.ToLower(u)
		if ours[u] {
			continue
		}
		name := qemuName(p.Argv)
		if pf, _ := argValue(p.Argv, "-pidfile"); strings.HasPrefix(pf, runRoot+"/vms/") {
			out = append(out, Entry{Name: name, UID: u, Class: ClassOrphaned, Phase: PhaseRunning, PID: p.PID, Accel: argAccel(p.Argv),
				Message: "a virtcon QEMU without a spec: inspect, then kill it by pid if unwanted (gc never kills processes)"})
			continue
		}
		src := "qemu"
		if strings.Contains(strings.Join(p.Argv, " "), "libvirt") {
			src = "libvirt"
		}
		seenExternal[u] = true
		out = append(out, Entry{Name: name, UID: u, Class: ClassExternal, Phase: PhaseRunning, PID: p.PID, Accel: argAccel(p.Argv), Source: src,
			Message: "not managed by virtcon: listed read-only"})
	}
	for _, d := range m.libvirtDomains() {
		if !seenExternal[d.UID] && !ours[d.UID] {
			out = append(out, Entry{Name: d.Name, UID: d.UID, Class: ClassExternal, Phase: PhaseStopped, Source: "libvirt", Message: "libvirt domain: listed read-only"})
		}
	}
	for _, o := range m.orphans(vms, byUID) {
		out = append(out, Entry{Name: "-", UID: o.UID, Class: ClassOrphaned, Phase: PhaseStopped, Message: o.What + ": " + o.Path})
	}
	var err error
	if len(errs) > 0 {
		err = errors.Join(errs...)
	}
	return out, err
}

func (m *Manager) entryFor(vm *VirtualMachine) Entry {
	e := Entry{
		Name: vm.Metadata.Name, UID: vm.Metadata.UID, Class: ClassManaged, Phase: PhaseStopped,
		CPUs: vm.Spec.CPUs, MemoryMiB: vm.Spec.MemoryMiB,
		Generation: vm.Metadata.Generation, ObservedGeneration: vm.Status.ObservedGeneration,
		Accel: vm.Status.Accel, AccelReason: vm.Status.AccelReason,
	}
	if vm.Spec.Running {
		e.Class = ClassMissing
		e.Message = "spec says running but the QEMU process is gone (virt vm start to restart, virt vm stop to accept)"
	}
	return e
}

// observeLive fills the phase of a live VM from QMP, falling back to the
// process state when QMP does not answer.
func (m *Manager) observeLive(ctx context.Context, e *Entry, pid int) {
	e.Class, e.PID, e.Message = ClassManaged, pid, ""
	if argv, err := m.proc.cmdline(pid); err == nil {
		e.Accel = argAccel(argv)
	}
	if st, err := m.proc.state(pid); err == nil && st == "T" {
		e.Phase, e.Message = PhaseUnresponsive, "the QEMU process is stopped (SIGSTOP)"
		return
	}
	ctx, cancel := context.WithTimeout(ctx, listQMPTimeout)
	defer cancel()
	mon, err := m.dialQMP(ctx, e.UID)
	if err != nil {
		if errors.Is(err, qmp.ErrBusy) {
			e.Phase, e.Message = PhaseRunning, "QMP busy: another virtcon command holds it"
			return
		}
		e.Phase, e.Message = PhaseUnresponsive, "QMP: "+err.Error()
		return
	}
	defer mon.Close()
	st, err := mon.Status(ctx)
	if err != nil {
		e.Phase, e.Message = PhaseUnresponsive, "QMP query-status: "+err.Error()
		return
	}
	e.Phase = phaseFromQMP(st.Status)
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

// qemuName reads -name guest=X,... or -name X.
func qemuName(argv []string) string {
	v, ok := argValue(argv, "-name")
	if !ok {
		return "-"
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
	return "-"
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
	Name string `xml:"name"`
	UID  string `xml:"uuid"`
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

// Orphan is one of our leftovers without a spec.
type Orphan struct {
	UID  string `json:"uid" yaml:"uid"`
	What string `json:"what" yaml:"what"`
	Path string `json:"path" yaml:"path"`
}

func (m *Manager) orphans(vms []*VirtualMachine, live map[string]qemuProcess) []Orphan {
	ours := map[string]bool{}
	for _, vm := range vms {
		ours[vm.Metadata.UID] = true
	}
	var out []Orphan
	l := m.layout()
	for _, c := range []struct{ dir, what string }{
		{filepath.Join(l.StateDir(), "vms"), "volumes without a VM spec"},
		{filepath.Join(l.RunDir(), "vms"), "runtime leftovers without a VM spec"},
		{filepath.Join(l.LogDir(), "vms"), "logs of a deleted VM"},
	} {
		ents, _ := os.ReadDir(c.dir)
		for _, e := range ents {
			if !e.IsDir() || ours[e.Name()] {
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
	orphans := m.orphans(vms, live)
	if orphans == nil {
		orphans = []Orphan{}
	}
	if dryRun {
		return orphans, nil
	}
	var rmErrs []error
	for _, o := range orphans {
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
