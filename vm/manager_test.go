package vm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/paths"
)

// newTestManager returns a Manager under a temporary root with a fake host
// root (an empty proc/) and binaries that do not exist, so nothing here
// can start a real QEMU. It returns the layout root and the host root.
func newTestManager(t *testing.T) (*Manager, string, string) {
	t.Helper()
	root, host := shortTempDir(t), t.TempDir()
	if err := os.MkdirAll(filepath.Join(host, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := NewManager(Options{
		Layout:   paths.New(root),
		HostRoot: host,
		QEMU:     filepath.Join(root, "no-such-qemu"),
		QEMUImg:  filepath.Join(root, "no-such-qemu-img"),
		Limits:   &Limits{CPUs: 4, MemoryMiB: 4096},
		Accel:    func(context.Context) (string, string) { return "tcg", "test" },
	})
	return m, root, host
}

// shortTempDir is a temporary directory with a short path: t.TempDir
// carries the test's name, and socket paths must fit in 107 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testKernel writes a stand-in kernel file and returns its path.
func testKernel(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vmlinuz")
	if err := os.WriteFile(p, []byte("not really a kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func kernelVM(name, kernel string) *VirtualMachine {
	return &VirtualMachine{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: name},
		Spec: Spec{Boot: &Boot{Kernel: kernel, Cmdline: "console=ttyS0"}}}
}

func mustCreate(t *testing.T, m *Manager, vm *VirtualMachine) *VirtualMachine {
	t.Helper()
	got, err := m.Create(context.Background(), vm)
	if err != nil {
		t.Fatalf("Create(%q): %v", vm.Metadata.Name, err)
	}
	return got
}

// dirEntries lists a directory's names; a missing directory is empty.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

var uidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestCreate(t *testing.T) {
	t.Parallel()
	m, root, _ := newTestManager(t)
	ctx := context.Background()
	in := kernelVM("web", testKernel(t))
	in.Metadata.Generation = 7
	in.Status = Status{Phase: PhaseRunning, PID: 42}
	vm := mustCreate(t, m, in)
	if !uidRE.MatchString(vm.Metadata.UID) {
		t.Errorf("uid: got %q; want a lower-case UUID", vm.Metadata.UID)
	}
	if vm.Metadata.Generation != 1 {
		t.Errorf("generation: got %d; want 1", vm.Metadata.Generation)
	}
	if vm.Metadata.CreationTimestamp == nil {
		t.Errorf("creationTimestamp: got nil; want set")
	}
	if vm.Status.Phase != "" || vm.Status.PID != 0 {
		t.Errorf("status: got %+v; want empty", vm.Status)
	}
	if vm.Spec.Firmware != "bios" || vm.Spec.CPUs != 1 || vm.Spec.MemoryMiB != 512 {
		t.Errorf("defaults: got firmware %q cpus %d memory %d; want bios 1 512", vm.Spec.Firmware, vm.Spec.CPUs, vm.Spec.MemoryMiB)
	}
	spec := filepath.Join(root, "var/lib/virtcon/vms", vm.Metadata.UID, "vm.yaml")
	st, err := os.Stat(spec)
	if err != nil {
		t.Fatalf("spec file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("spec file mode: got %v; want 0600", st.Mode().Perm())
	}
	if st, err := os.Stat(filepath.Dir(spec)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("state dir: got %v, %v; want mode 0700", st, err)
	}
	stored, err := m.store.load(vm.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Metadata.Name != "web" || stored.Metadata.Generation != 1 || stored.Spec.Running {
		t.Errorf("stored: got name %q generation %d running %v; want web 1 false", stored.Metadata.Name, stored.Metadata.Generation, stored.Spec.Running)
	}
	for _, ref := range []string{"web", "WEB", vm.Metadata.UID} {
		got, e, err := m.Get(ctx, ref)
		if err != nil {
			t.Fatalf("Get(%q): %v", ref, err)
		}
		if got.Metadata.UID != vm.Metadata.UID || got.Status.Phase != PhaseStopped || e.Class != ClassManaged {
			t.Errorf("Get(%q): got uid %s phase %q class %q; want %s Stopped MANAGED", ref, got.Metadata.UID, got.Status.Phase, e.Class, vm.Metadata.UID)
		}
	}
	for _, ref := range []string{"", " ", "nope", "00000000-0000-0000-0000-000000000000"} {
		_, _, err := m.Get(ctx, ref)
		if err == nil {
			t.Errorf("Get(%q): got nil error; want one", ref)
		}
	}
	if _, _, err := m.Get(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Get(\"\"): got %v; want ErrInvalid", err)
	}
	if _, _, err := m.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(nope): got %v; want ErrNotFound", err)
	}
}

func TestCreateRefuses(t *testing.T) {
	t.Parallel()
	kernel := testKernel(t)
	withImage := kernelVM("db", kernel)
	withImage.Spec.Disks = []Disk{{Name: "root", Image: "nope", Size: "1G"}}
	tests := []struct {
		name    string
		vm      *VirtualMachine
		wantIs  error
		wantMsg []string
	}{
		{"duplicate name", kernelVM("web", kernel), ErrInvalid, []string{"metadata.name", `"web"`}},
		{"duplicate name other case", kernelVM("WEB", kernel), ErrInvalid, []string{"metadata.name", `"WEB"`}},
		{"invalid", &VirtualMachine{Metadata: Metadata{Name: "x"}, Spec: Spec{CPUs: 5, Boot: &Boot{Kernel: kernel}}}, ErrInvalid, []string{"spec.cpus", "(got 5)"}},
		{"missing image", withImage, ErrNotFound, []string{"spec.disks[0].image", `"nope"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, root, _ := newTestManager(t)
			first := mustCreate(t, m, kernelVM("web", kernel))
			_, err := m.Create(context.Background(), tt.vm)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("Create: got %v; want %v", err, tt.wantIs)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error: got %q; want it to contain %q", err, w)
				}
			}
			// Nothing left behind: only the first VM's directory.
			if got := dirEntries(t, filepath.Join(root, "var/lib/virtcon/vms")); len(got) != 1 || got[0] != first.Metadata.UID {
				t.Errorf("state dirs: got %q; want only %s", got, first.Metadata.UID)
			}
		})
	}
}

func TestCreateMissingImageLeavesNothing(t *testing.T) {
	t.Parallel()
	m, root, _ := newTestManager(t)
	vm := &VirtualMachine{Metadata: Metadata{Name: "db"}, Spec: Spec{Disks: []Disk{{Name: "root", Image: "debian-12"}}}}
	_, err := m.Create(context.Background(), vm)
	if err == nil || !strings.Contains(err.Error(), "spec.disks[0].image") {
		t.Fatalf("Create: got %v; want an error naming spec.disks[0].image", err)
	}
	if got := dirEntries(t, filepath.Join(root, "var/lib/virtcon/vms")); len(got) != 0 {
		t.Errorf("state dirs: got %q; want none", got)
	}
}

func TestCreateUID(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	kernel := testKernel(t)
	in := kernelVM("web", kernel)
	in.Metadata.UID = strings.ToUpper(testUID)
	vm := mustCreate(t, m, in)
	if vm.Metadata.UID != testUID {
		t.Fatalf("uid: got %q; want %q", vm.Metadata.UID, testUID)
	}
	for _, uid := range []string{testUID, strings.ToUpper(testUID)} {
		other := kernelVM("other", kernel)
		other.Metadata.UID = uid
		_, err := m.Create(context.Background(), other)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "metadata.uid") {
			t.Errorf("Create with taken uid %q: got %v; want ErrInvalid naming metadata.uid", uid, err)
		}
	}
	stored, err := m.store.load(testUID)
	if err != nil || stored.Metadata.Name != "web" {
		t.Errorf("stored: got %v, %v; want the first VM untouched", stored, err)
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	kernel := testKernel(t)
	manifest := func(name, extraSpec, labels string) *VirtualMachine {
		t.Helper()
		y := "apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata:\n  name: " + name + "\n  labels: {" + labels + "}\n" +
			"spec:\n  boot: {kernel: " + kernel + "}\n  disks: []\n  network: []\n" + extraSpec
		vm, err := Decode([]byte(y))
		if err != nil {
			t.Fatalf("Decode: %v\n%s", err, y)
		}
		return vm
	}
	steps := []struct {
		name          string
		in            *VirtualMachine
		wantAction    string
		wantName      string
		wantGen       int64
		wantMemoryMiB int
	}{
		{"create", manifest("app", "", ""), "created", "app", 1, 512},
		{"identical", manifest("app", "", ""), "unchanged", "app", 1, 512},
		{"defaults spelled out", manifest("app", "  cpus: 1\n  memoryMiB: 512\n  firmware: bios\n  accel: auto\n  machine: q35\n", ""), "unchanged", "app", 1, 512},
		{"spec change", manifest("app", "  memoryMiB: 1024\n", ""), "configured", "app", 2, 1024},
		{"identical again", manifest("app", "  memoryMiB: 1024\n", ""), "unchanged", "app", 2, 1024},
		{"label change", manifest("app", "  memoryMiB: 1024\n", "tier: web"), "configured", "app", 2, 1024},
		{"name case change", manifest("APP", "  memoryMiB: 1024\n", "tier: web"), "configured", "APP", 2, 1024},
	}
	var uid string
	for _, s := range steps {
		res, err := m.Apply(ctx, s.in)
		if err != nil {
			t.Fatalf("%s: Apply: %v", s.name, err)
		}
		if uid == "" {
			uid = res.VM.Metadata.UID
			// as if it had been started at generation 1
			vm, _ := m.store.load(uid)
			vm.Status.ObservedGeneration = 1
			if err := m.store.save(vm); err != nil {
				t.Fatal(err)
			}
		}
		stored, err := m.store.load(uid)
		if err != nil {
			t.Fatal(err)
		}
		if res.Action != s.wantAction || res.VM.Metadata.UID != uid {
			t.Errorf("%s: got action %q uid %s; want %q %s", s.name, res.Action, res.VM.Metadata.UID, s.wantAction, uid)
		}
		if stored.Metadata.Generation != s.wantGen || stored.Metadata.Name != s.wantName || stored.Spec.MemoryMiB != s.wantMemoryMiB {
			t.Errorf("%s: got generation %d name %q memory %d; want %d %q %d", s.name, stored.Metadata.Generation, stored.Metadata.Name, stored.Spec.MemoryMiB, s.wantGen, s.wantName, s.wantMemoryMiB)
		}
		if stored.Status.ObservedGeneration != 1 {
			t.Errorf("%s: status.observedGeneration: got %d; want 1 (only a start observes)", s.name, stored.Status.ObservedGeneration)
		}
		if stored.Spec.Running {
			t.Errorf("%s: spec.running: got true; want false", s.name)
		}
	}
	// By uid: a rename.
	in := manifest("renamed", "  memoryMiB: 1024\n", "tier: web")
	in.Metadata.UID = strings.ToUpper(uid)
	res, err := m.Apply(ctx, in)
	if err != nil || res.Action != "configured" || res.VM.Metadata.Name != "renamed" || res.VM.Metadata.UID != uid {
		t.Errorf("apply by uid: got %+v, %v; want configured, renamed, uid %s", res, err, uid)
	}
	// A rename onto another VM's name is refused.
	mustCreate(t, m, kernelVM("taken", kernel))
	in = manifest("TAKEN", "  memoryMiB: 1024\n", "tier: web")
	in.Metadata.UID = uid
	if _, err := m.Apply(ctx, in); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"TAKEN"`) {
		t.Errorf("rename onto a taken name: got %v; want ErrInvalid naming \"TAKEN\"", err)
	}
	// An invalid update is refused and changes nothing.
	if _, err := m.Apply(ctx, manifest("renamed", "  cpus: 99\n", "")); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid update: got %v; want ErrInvalid", err)
	}
	if stored, _ := m.store.load(uid); stored.Spec.CPUs != 1 || stored.Metadata.Generation != 2 {
		t.Errorf("after refused updates: got cpus %d generation %d; want 1 2", stored.Spec.CPUs, stored.Metadata.Generation)
	}
}

func TestApplyDisks(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	// Stored directly: no qemu-img here to make the disk files.
	disks := []Disk{{Name: "root", Image: "debian-12", Size: "10G"}, {Name: "data", Size: "1G"}}
	vm := &VirtualMachine{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: "db", UID: testUID, Generation: 1}, Spec: Spec{Disks: disks}}
	Defaults(vm)
	if err := m.store.save(vm); err != nil {
		t.Fatal(err)
	}
	apply := func(ds ...Disk) (*ApplyResult, error) {
		in := &VirtualMachine{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: "db"}, Spec: Spec{Disks: ds}}
		return m.Apply(ctx, in)
	}
	if res, err := apply(disks...); err != nil || res.Action != "unchanged" {
		t.Errorf("identical disks: got %+v, %v; want unchanged", res, err)
	}
	tests := []struct {
		name  string
		disks []Disk
		want  []string
	}{
		{"removal", disks[:1], []string{"spec.disks", "(got 1)", "cannot be removed"}},
		{"image change", []Disk{{Name: "root", Image: "ubuntu", Size: "10G"}, disks[1]}, []string{"spec.disks[0]", `"root"`}},
		{"rename", []Disk{disks[0], {Name: "data2", Size: "1G"}}, []string{"spec.disks[1]", `"data2"`}},
		{"reorder", []Disk{disks[1], disks[0]}, []string{"spec.disks[0]", `"data"`}},
	}
	for _, tt := range tests {
		_, err := apply(tt.disks...)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v; want ErrInvalid", tt.name, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: got %q; want it to contain %q", tt.name, err, w)
			}
		}
	}
	stored, err := m.store.load(testUID)
	if err != nil || len(stored.Spec.Disks) != 2 || stored.Metadata.Generation != 1 {
		t.Errorf("stored after refusals: got %+v, %v; want 2 disks, generation 1", stored, err)
	}
}

func TestListStopped(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	kernel := testKernel(t)
	mustCreate(t, m, kernelVM("b-web", kernel))
	gone := mustCreate(t, m, kernelVM("A-db", kernel))
	gone.Spec.Running = true // the spec says running; no process
	if err := m.store.save(gone); err != nil {
		t.Fatal(err)
	}
	got, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("List: got %d entries; want 2: %+v", len(got), got)
	}
	want := []struct{ name, class, phase string }{{"A-db", ClassMissing, PhaseStopped}, {"b-web", ClassManaged, PhaseStopped}}
	for i, w := range want {
		e := got[i]
		if e.Name != w.name || e.Class != w.class || e.Phase != w.phase || e.PID != 0 {
			t.Errorf("entry %d: got %s %s %s pid %d; want %s %s %s pid 0", i, e.Name, e.Class, e.Phase, e.PID, w.name, w.class, w.phase)
		}
		if e.CPUs != 1 || e.MemoryMiB != 512 || e.Generation != 1 {
			t.Errorf("entry %d: got cpus %d memory %d generation %d; want 1 512 1", i, e.CPUs, e.MemoryMiB, e.Generation)
		}
	}
	if !strings.Contains(got[0].Message, "spec says running") {
		t.Errorf("MISSING message: got %q; want it to explain", got[0].Message)
	}
	// Stop accepts a MISSING VM as stopped.
	if err := m.Stop(ctx, "a-db", StopOptions{}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got, _ := m.List(ctx); got[0].Class != ClassManaged {
		t.Errorf("after Stop: got class %s; want MANAGED", got[0].Class)
	}
}

// hostFixture lays out one of everything List and GC classify.
type hostFixture struct {
	m                                 *Manager
	root, host                        string
	managed, live, stopped            *VirtualMachine
	orphanState, orphanRun, orphanLog string // orphan directories
	partial, unmarked, image          string // image files
	liveOrphanRun                     string // a run dir whose QEMU still runs
	libvirtXML                        string
}

const (
	uidOrphanState = "aaaaaaaa-0000-0000-0000-000000000001"
	uidOrphanRun   = "aaaaaaaa-0000-0000-0000-000000000002"
	uidOrphanLog   = "aaaaaaaa-0000-0000-0000-000000000003"
	uidLiveOrphan  = "aaaaaaaa-0000-0000-0000-000000000004"
	uidExternal    = "bbbbbbbb-0000-0000-0000-000000000001"
	uidLibvirtLive = "bbbbbbbb-0000-0000-0000-000000000002"
	uidLibvirtOff  = "bbbbbbbb-0000-0000-0000-000000000003"
)

func newHostFixture(t *testing.T) *hostFixture {
	t.Helper()
	m, root, host := newTestManager(t)
	f := &hostFixture{m: m, root: root, host: host}
	kernel := testKernel(t)
	f.stopped = mustCreate(t, m, kernelVM("stopped", kernel))
	f.live = mustCreate(t, m, kernelVM("live", kernel))
	f.managed = mustCreate(t, m, kernelVM("paused", kernel))
	proc := filepath.Join(host, "proc")
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l := m.layout()
	// Our live VMs, as the fake /proc shows them (never signalled: the
	// tests below only list and gc). "live" answers no QMP; "paused" is
	// SIGSTOPped; both are found by their pidfiles.
	fakeProc(t, proc, 301, "S", qemuArgv(f.live.Metadata.UID, "-accel", "kvm")...)
	write(m.runPath(f.live.Metadata.UID, pidFileName), "301\n")
	fakeProc(t, proc, 302, "T", qemuArgv(f.managed.Metadata.UID)...)
	write(m.runPath(f.managed.Metadata.UID, pidFileName), "302\n")
	write(m.SerialLogPath(f.stopped.Metadata.UID), "boot log\n")
	// Orphans.
	f.orphanState = l.VMStateDir(uidOrphanState)
	write(filepath.Join(f.orphanState, "disk-root.qcow2"), "disk")
	f.orphanRun = l.VMRunDir(uidOrphanRun)
	write(filepath.Join(f.orphanRun, "qmp.sock"), "")
	f.orphanLog = filepath.Join(l.LogDir(), "vms", uidOrphanLog)
	write(filepath.Join(f.orphanLog, "serial.log"), "old log")
	f.partial = filepath.Join(l.ImagesDir(), ".debian.img.partial")
	write(f.partial, "half")
	f.unmarked = filepath.Join(l.ImagesDir(), "unmarked.img")
	write(f.unmarked, "no marker")
	f.image = filepath.Join(l.ImagesDir(), "complete.img")
	write(f.image, "image")
	write(f.image+".sha256", `{"name":"complete","format":"raw"}`)
	// A QEMU of ours without a spec, still running.
	f.liveOrphanRun = l.VMRunDir(uidLiveOrphan)
	write(filepath.Join(f.liveOrphanRun, "qemu.pid"), "303\n")
	fakeProc(t, proc, 303, "S", qemuArgv(uidLiveOrphan, "-pidfile", filepath.Join(f.liveOrphanRun, "qemu.pid"))...)
	// External guests.
	fakeProc(t, proc, 401, "S", "/usr/bin/qemu-system-x86_64", "-name", "guest=ext,debug-threads=on", "-uuid", uidExternal, "-machine", "pc,accel=kvm")
	fakeProc(t, proc, 402, "S", "/usr/bin/qemu-system-x86_64", "-name", "guest=lv", "-uuid", strings.ToUpper(uidLibvirtLive), "-pidfile", "/run/libvirt/qemu/lv.pid")
	fakeProc(t, proc, 403, "S", "/usr/bin/bash")
	f.libvirtXML = filepath.Join(host, "etc/libvirt/qemu/win.xml")
	write(f.libvirtXML, "<domain type='kvm'><name>win</name><uuid>"+strings.ToUpper(uidLibvirtOff)+"</uuid><memory>1</memory></domain>")
	write(filepath.Join(host, "etc/libvirt/qemu/lv.xml"), "<domain type='kvm'><name>lv</name><uuid>"+uidLibvirtLive+"</uuid></domain>")
	write(filepath.Join(host, "etc/libvirt/qemu/broken.xml"), "<domain><name>")
	return f
}

func TestListClassifies(t *testing.T) {
	t.Parallel()
	f := newHostFixture(t)
	got, err := f.m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Name, UID, Class, Phase, Accel, Source string }
	var rows []row
	byKey := map[string]Entry{}
	for _, e := range got {
		rows = append(rows, row{e.Name, e.UID, e.Class, e.Phase, e.Accel, e.Source})
		key := e.UID
		if key == "" {
			key = e.Message
		}
		byKey[key] = e
	}
	want := []row{
		{"live", f.live.Metadata.UID, ClassManaged, PhaseUnresponsive, "kvm", ""},
		{"paused", f.managed.Metadata.UID, ClassManaged, PhaseUnresponsive, "tcg", ""},
		{"stopped", f.stopped.Metadata.UID, ClassManaged, PhaseStopped, "", ""},
		{"x", uidLiveOrphan, ClassOrphaned, PhaseRunning, "tcg", ""},
		{"ext", uidExternal, ClassExternal, PhaseRunning, "kvm", "qemu"},
		{"lv", uidLibvirtLive, ClassExternal, PhaseRunning, "tcg", "libvirt"},
		{"win", uidLibvirtOff, ClassExternal, PhaseStopped, "", "libvirt"},
		{"", uidOrphanState, ClassOrphaned, PhaseStopped, "", ""},
		{"", uidOrphanRun, ClassOrphaned, PhaseStopped, "", ""},
		{"", uidOrphanLog, ClassOrphaned, PhaseStopped, "", ""},
		{"", "", ClassOrphaned, PhaseStopped, "", ""},
		{"", "", ClassOrphaned, PhaseStopped, "", ""},
	}
	sortRows := func(rs []row) {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Class+rs[i].UID+rs[i].Name < rs[j].Class+rs[j].UID+rs[j].Name })
	}
	sortRows(rows)
	sortRows(want)
	if len(rows) != len(want) {
		t.Fatalf("List: got %d entries; want %d\ngot  %+v\nwant %+v", len(rows), len(want), rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("entry: got %+v; want %+v", rows[i], want[i])
		}
	}
	if e := byKey[f.live.Metadata.UID]; e.PID != 301 || !strings.HasPrefix(e.Message, "QMP: ") {
		t.Errorf("live: got pid %d message %q; want 301 and a QMP error", e.PID, e.Message)
	}
	if e := byKey[f.managed.Metadata.UID]; e.PID != 302 || !strings.Contains(e.Message, "SIGSTOP") {
		t.Errorf("stopped process: got pid %d message %q; want 302 and SIGSTOP", e.PID, e.Message)
	}
	if e := byKey[uidLiveOrphan]; e.PID != 303 {
		t.Errorf("live orphan: got pid %d; want 303", e.PID)
	}
	for _, k := range []string{
		"volumes without a VM spec: " + f.orphanState,
		"runtime leftovers without a VM spec: " + f.orphanRun,
		"logs of a deleted VM: " + f.orphanLog,
	} {
		found := false
		for _, e := range got {
			found = found || e.Message == k
		}
		if !found {
			t.Errorf("List: got no entry with message %q", k)
		}
	}
	for _, p := range []string{f.partial, f.unmarked} {
		found := false
		for _, e := range got {
			found = found || strings.HasSuffix(e.Message, ": "+p)
		}
		if !found {
			t.Errorf("List: got no orphan entry for %s", p)
		}
	}
}

func TestGC(t *testing.T) {
	t.Parallel()
	f := newHostFixture(t)
	ctx := context.Background()
	orphans := []string{f.orphanState, f.orphanRun, f.orphanLog, f.partial, f.unmarked}
	kept := []string{
		f.image, f.image + ".sha256", f.libvirtXML, f.liveOrphanRun,
		f.m.store.specPath(f.stopped.Metadata.UID), f.m.store.specPath(f.live.Metadata.UID), f.m.store.specPath(f.managed.Metadata.UID),
		f.m.SerialLogPath(f.stopped.Metadata.UID), f.m.runPath(f.live.Metadata.UID, pidFileName),
		filepath.Join(f.host, "proc", "301"),
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	listed, err := f.m.GC(ctx, true)
	if err != nil {
		t.Fatalf("GC dry run: %v", err)
	}
	var paths []string
	for _, o := range listed {
		paths = append(paths, o.Path)
	}
	sort.Strings(paths)
	want := append([]string(nil), orphans...)
	sort.Strings(want)
	if strings.Join(paths, "\n") != strings.Join(want, "\n") {
		t.Errorf("GC dry run: got %q; want %q", paths, want)
	}
	for _, p := range append(orphans, kept...) {
		if !exists(p) {
			t.Errorf("after dry run: got %s removed; want it kept", p)
		}
	}

	removed, err := f.m.GC(ctx, false)
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if len(removed) != len(orphans) {
		t.Errorf("GC: got %d removed; want %d", len(removed), len(orphans))
	}
	for _, p := range orphans {
		if exists(p) {
			t.Errorf("after GC: got %s kept; want it removed", p)
		}
	}
	for _, p := range kept {
		if !exists(p) {
			t.Errorf("after GC: got %s removed; want it kept", p)
		}
	}
	again, err := f.m.GC(ctx, false)
	if err != nil || again == nil || len(again) != 0 {
		t.Errorf("second GC: got %v, %v; want an empty list", again, err)
	}
}

func TestGCRefusesWithUnreadableSpec(t *testing.T) {
	t.Parallel()
	m, root, _ := newTestManager(t)
	bad := filepath.Join(root, "var/lib/virtcon/vms", uidOrphanState)
	if err := os.MkdirAll(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "vm.yaml"), []byte("metadata: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GC(context.Background(), false); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("GC: got %v; want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(bad, "vm.yaml")); err != nil {
		t.Errorf("unreadable spec: got %v; want it kept", err)
	}
	if _, err := m.List(context.Background()); err == nil {
		t.Errorf("List: got nil error; want the unreadable spec reported")
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	m, root, _ := newTestManager(t)
	ctx := context.Background()
	kernel := testKernel(t)
	vm := mustCreate(t, m, kernelVM("web", kernel))
	keep := mustCreate(t, m, kernelVM("keep", kernel))
	uid := vm.Metadata.UID
	for _, p := range []string{
		m.runPath(uid, qmpSockName), m.SerialLogPath(uid),
		filepath.Join(m.layout().VMStateDir(uid), "seed.iso"), m.diskPath(uid, "root"),
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Delete(ctx, "WEB", false); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, d := range []string{m.layout().VMStateDir(uid), m.layout().VMRunDir(uid), filepath.Dir(m.SerialLogPath(uid)), m.store.lockPath("vm-" + uid)} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Delete: got %s present (%v); want it gone", d, err)
		}
	}
	if _, err := m.store.load(keep.Metadata.UID); err != nil {
		t.Errorf("other VM: got %v; want it kept", err)
	}
	if err := m.Delete(ctx, "web", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: got %v; want ErrNotFound", err)
	}
	entries, err := m.List(ctx)
	if err != nil || len(entries) != 1 || entries[0].Name != "keep" {
		t.Errorf("List after Delete: got %+v, %v; want only keep", entries, err)
	}
	if got := dirEntries(t, filepath.Join(root, "var/lib/virtcon/vms")); len(got) != 1 {
		t.Errorf("state dirs: got %q; want one", got)
	}
}

func TestStartFailsCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kernel := testKernel(t)
	uefi := kernelVM("uefi", kernel)
	uefi.Spec.Firmware = "uefi"
	running := kernelVM("running", kernel)
	running.Spec.Running = true
	tests := []struct {
		name      string
		vm        *VirtualMachine
		viaCreate bool
		stale     bool // leave a socket of an earlier run behind
		want      []string
	}{
		{"missing qemu binary", kernelVM("web", kernel), false, true, []string{`vm "web": start:`, "no-such-qemu"}},
		{"missing qemu on create", running, true, false, []string{`vm "running": start:`, "no-such-qemu"}},
		{"uefi without OVMF", uefi, false, false, []string{`vm "uefi": start:`, "OVMF"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _, _ := newTestManager(t)
			var err error
			var uid string
			if tt.viaCreate {
				var vm *VirtualMachine
				vm, err = m.Create(ctx, tt.vm)
				if vm == nil {
					t.Fatalf("Create: got nil VM, %v; want the created VM and the start error", err)
				}
				uid = vm.Metadata.UID
			} else {
				uid = mustCreate(t, m, tt.vm).Metadata.UID
				if tt.stale {
					stale := m.runPath(uid, qmpSockName)
					if err := os.MkdirAll(filepath.Dir(stale), 0o700); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(stale, nil, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				err = m.Start(ctx, tt.vm.Metadata.Name)
			}
			if err == nil {
				t.Fatalf("Start: got nil error; want one")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error: got %q; want it to contain %q", err, w)
				}
			}
			stored, lerr := m.store.load(uid)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if stored.Spec.Running || stored.Status.PID != 0 || stored.Status.Phase != "" {
				t.Errorf("stored after failed start: got running %v status %+v; want false and empty", stored.Spec.Running, stored.Status)
			}
			if got := dirEntries(t, m.layout().VMRunDir(uid)); len(got) != 0 {
				t.Errorf("runtime files: got %q; want none", got)
			}
			e, _ := m.List(ctx)
			if len(e) != 1 || e[0].Class != ClassManaged || e[0].Phase != PhaseStopped {
				t.Errorf("List: got %+v; want one MANAGED Stopped", e)
			}
		})
	}
}

func TestNotRunning(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	mustCreate(t, m, kernelVM("web", testKernel(t)))
	ops := map[string]func() error{
		"pause":   func() error { return m.Pause(ctx, "web") },
		"resume":  func() error { return m.Resume(ctx, "web") },
		"reboot":  func() error { return m.Reboot(ctx, "web") },
		"console": func() error { return m.Console(ctx, "web", strings.NewReader(""), &bytes.Buffer{}, nil) },
		"ip":      func() error { _, err := m.IP(ctx, "web"); return err },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), `vm "web"`) {
			t.Errorf("%s: got %v; want ErrNotRunning naming the VM", name, err)
		}
	}
	for name, op := range map[string]func() error{
		"pause":  func() error { return m.Pause(ctx, "nope") },
		"start":  func() error { return m.Start(ctx, "nope") },
		"stop":   func() error { return m.Stop(ctx, "nope", StopOptions{}) },
		"delete": func() error { return m.Delete(ctx, "nope", true) },
	} {
		if err := op(); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s of a missing VM: got %v; want ErrNotFound", name, err)
		}
	}
}

func TestLogs(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	vm := mustCreate(t, m, kernelVM("web", testKernel(t)))
	var buf bytes.Buffer
	if err := m.Logs(ctx, "web", &buf, false); err != nil || buf.Len() != 0 {
		t.Errorf("Logs before any start: got %q, %v; want nothing", buf.String(), err)
	}
	p := m.SerialLogPath(vm.Metadata.UID)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("login: "), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Logs(ctx, "web", &buf, false); err != nil || buf.String() != "login: " {
		t.Errorf("Logs: got %q, %v; want %q", buf.String(), err, "login: ")
	}
}

func TestCapLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "serial.log")
	data := bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	capLog(p, 2048)
	if b, _ := os.ReadFile(p); len(b) != len(data) {
		t.Errorf("under the cap: got %d bytes; want %d", len(b), len(data))
	}
	capLog(p, 512)
	if b, _ := os.ReadFile(p); len(b) != 0 {
		t.Errorf("over the cap: got %d bytes; want the log emptied", len(b))
	}
	if b, _ := os.ReadFile(p + ".1"); !bytes.Equal(b, data[len(data)-256:]) {
		t.Errorf("kept tail: got %d bytes; want the last 256", len(b))
	}
	capLog(filepath.Join(dir, "missing.log"), 1) // no panic, nothing made
	if _, err := os.Stat(filepath.Join(dir, "missing.log.1")); err == nil {
		t.Errorf("capLog of a missing file: got a .1 file; want none")
	}
}

func TestLaunchFor(t *testing.T) {
	t.Parallel()
	m, root, host := newTestManager(t)
	kernel := testKernel(t)
	vm := kernelVM("web", kernel)
	vm.Spec.Boot.Initrd = kernel + ".initrd"
	vm = mustCreate(t, m, vm)
	uid := vm.Metadata.UID
	l, err := m.launchFor(vm, "tcg")
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(root, "run/virtcon/vms", uid)
	want := Launch{
		UID: uid, Name: "web", CPUs: 1, MemoryMiB: 512, Machine: "q35", Accel: "tcg", Firmware: "bios",
		Seed: filepath.Join(root, "var/lib/virtcon/vms", uid, "seed.iso"), Kernel: kernel, Initrd: kernel + ".initrd", Cmdline: "console=ttyS0",
		MAC: MACFor(uid, 0), PIDFile: filepath.Join(run, "qemu.pid"), QMPSocket: filepath.Join(run, "qmp.sock"), EvtSocket: filepath.Join(run, "qmp-events.sock"),
		WatchSocket: filepath.Join(run, "qmp-watch.sock"),
		Serial:      filepath.Join(run, "serial.sock"), AgentSock: filepath.Join(run, "qga.sock"), SerialLog: filepath.Join(root, "var/log/virtcon/vms", uid, "serial.log"),
	}
	if l.Disks != nil {
		t.Errorf("disks: got %+v; want none", l.Disks)
	}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("launchFor:\ngot  %+v\nwant %+v", l, want)
	}
	checkArgs(t, l, l.Args())

	// UEFI with a disk: the firmware pair and the VM's own NVRAM copy.
	ovmf := filepath.Join(host, "usr/share/OVMF")
	if err := os.MkdirAll(ovmf, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"OVMF_CODE_4M.fd": "code", "OVMF_VARS_4M.fd": "vars template"} {
		if err := os.WriteFile(filepath.Join(ovmf, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u := *vm
	u.Spec.Firmware, u.Spec.Boot = "uefi", nil
	u.Spec.Disks = []Disk{{Name: "root", Image: "debian-12"}}
	l, err = m.launchFor(&u, "kvm")
	if err != nil {
		t.Fatal(err)
	}
	if l.OVMFCode != filepath.Join(ovmf, "OVMF_CODE_4M.fd") || l.OVMFVars != filepath.Join(root, "var/lib/virtcon/vms", uid, "OVMF_VARS.fd") {
		t.Errorf("firmware: got %q %q; want the 4M code and the VM's vars", l.OVMFCode, l.OVMFVars)
	}
	if len(l.Disks) != 1 || l.Disks[0] != (LaunchDisk{Name: "root", Path: m.diskPath(uid, "root"), Format: "qcow2"}) {
		t.Errorf("disks: got %+v; want the root overlay", l.Disks)
	}
	checkArgs(t, l, l.Args())
	if err := m.ensureVars(l); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(l.OVMFVars)
	if err != nil || string(b) != "vars template" {
		t.Errorf("NVRAM: got %q, %v; want a copy of the template", b, err)
	}
	if st, _ := os.Stat(l.OVMFVars); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("NVRAM mode: got %v; want 0600", st)
	}
	if err := os.WriteFile(l.OVMFVars, []byte("guest state"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.ensureVars(l); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(l.OVMFVars); string(b) != "guest state" {
		t.Errorf("NVRAM after second ensureVars: got %q; want the guest's state kept", b)
	}
}

// A manifest printed by `virt vm show` has its user data masked; applying
// it back keeps the stored user data and changes nothing.
func TestApplyKeepsMaskedUserData(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	y := "apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: ci}\nspec:\n  boot: {kernel: " + testKernel(t) + "}\n  cloudInit:\n    userData: %s\n"
	in, err := Decode([]byte(strings.Replace(y, "%s", `"#cloud-config\npassword: hunter2"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, in); err != nil {
		t.Fatal(err)
	}
	masked, err := Decode([]byte(strings.Replace(y, "%s", `"[REDACTED]"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Apply(ctx, masked)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != "unchanged" || res.VM.Spec.CloudInit.UserData != "#cloud-config\npassword: hunter2" {
		t.Errorf("apply of the masked manifest: %s, user data %q; want unchanged and the stored user data", res.Action, res.VM.Spec.CloudInit.UserData)
	}
}
