package vm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/redact"
	"go.yaml.in/yaml/v3"
)

// A name with the shape of a UUID would let one VM answer to another's
// identity (issue 9, item 1).
func TestAdmissionRefusesUUIDShapedName(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	kernel := testKernel(t)
	victim := mustCreate(t, m, kernelVM("victim", kernel))
	for _, name := range []string{victim.Metadata.UID, strings.ToUpper(victim.Metadata.UID), "7c9ecca3-c156-494c-b4cf-e9d6344e2367"} {
		_, err := m.Create(context.Background(), kernelVM(name, kernel))
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) || ve.Errs[0].Field != "metadata.name" {
			t.Errorf("Create(%q): got %v; want a metadata.name validation error", name, err)
		}
	}
	// an ordinary name with dashes is fine
	mustCreate(t, m, kernelVM("web-01-a", kernel))
}

// A VM stored before the rule (or written by hand) may still carry a
// UUID-shaped name: a reference that is one VM's UID and another's name is
// an error, never a guess.
func TestFindAmbiguousNameAndUID(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	kernel := testKernel(t)
	victim := mustCreate(t, m, kernelVM("victim", kernel))
	impostor := kernelVM(victim.Metadata.UID, kernel)
	Defaults(impostor)
	impostor.Metadata.UID = "00000000-0000-4000-8000-000000000001"
	if err := m.store.save(impostor); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{victim.Metadata.UID, strings.ToUpper(victim.Metadata.UID)} {
		if _, err := m.find(ref); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("find(%q): got %v; want ErrAmbiguous", ref, err)
		}
		if err := m.Delete(context.Background(), ref, false); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("Delete(%q): got %v; want ErrAmbiguous", ref, err)
		}
	}
	if _, err := m.store.load(victim.Metadata.UID); err != nil {
		t.Errorf("victim after refused deletes: %v", err)
	}
	// each is still reachable by an unambiguous reference
	if vm, err := m.find("victim"); err != nil || vm.Metadata.UID != victim.Metadata.UID {
		t.Errorf("find(victim): got %v, %v", vm, err)
	}
	if vm, err := m.find(impostor.Metadata.UID); err != nil || vm.Metadata.UID != impostor.Metadata.UID {
		t.Errorf("find(impostor uid): got %v, %v", vm, err)
	}
}

// corruptSpecs are what a full disk, a truncate by hand or a bad editor
// leave of a spec (issue 9, item 2).
func corruptSpecs(t *testing.T, whole []byte) map[string][]byte {
	t.Helper()
	cut := len(whole) / 2
	for whole[cut-1] != '\n' { // at a line boundary: still valid YAML
		cut--
	}
	return map[string][]byte{
		"empty":              {},
		"truncated mid-line": whole[:len(whole)/2+3],
		"truncated at line":  whole[:cut],
		"garbage":            []byte("\x00\x01{{{ not yaml"),
		"another kind":       []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k1}\n"),
	}
}

func TestUnreadableSpecFailsClosed(t *testing.T) {
	t.Parallel()
	probe, _, _ := newTestManager(t)
	whole := func() []byte {
		vm := mustCreate(t, probe, kernelVM("k1", testKernel(t)))
		b, err := os.ReadFile(probe.store.specPath(vm.Metadata.UID))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()
	for name, content := range corruptSpecs(t, whole) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			m, _, _ := newTestManager(t)
			kernel := testKernel(t)
			k1 := mustCreate(t, m, kernelVM("k1", kernel))
			k2 := mustCreate(t, m, kernelVM("k2", kernel))
			path := m.store.specPath(k1.Metadata.UID)
			if name != "another kind" {
				content = []byte(strings.ReplaceAll(string(content), probeUID(t, whole), k1.Metadata.UID))
			}
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			// the unreadable VM is not "not found", by name or by UID
			for _, ref := range []string{"k1", k1.Metadata.UID} {
				_, err := m.find(ref)
				if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), path) {
					t.Errorf("find(%q): got %v; want an error naming %s", ref, err, path)
				}
				if err := m.Stop(ctx, ref, StopOptions{Force: true}); err == nil || errors.Is(err, ErrNotFound) {
					t.Errorf("Stop(%q): got %v; want it refused", ref, err)
				}
			}
			// a readable VM is still found by name: names are unique, so
			// the unreadable spec cannot be another k2
			if vm, err := m.find("k2"); err != nil || vm.Metadata.UID != k2.Metadata.UID {
				t.Errorf("find(k2): got %v, %v", vm, err)
			}
			// no second k1 (nor any VM) while a spec cannot be read
			for _, n := range []string{"k1", "k3"} {
				if _, err := m.Create(ctx, kernelVM(n, kernel)); err == nil || !strings.Contains(err.Error(), path) {
					t.Errorf("Create(%s): got %v; want refused naming %s", n, err, path)
				}
			}
			if _, err := m.Apply(ctx, kernelVM("k1", kernel)); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("Apply(k1): got %v; want refused naming %s", err, path)
			}
			entries, err := m.List(ctx)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("List: got error %v; want one naming %s", err, path)
			}
			var row *Entry
			for i, e := range entries {
				if e.UID == k1.Metadata.UID {
					if row != nil {
						t.Errorf("List: two rows for %s", k1.Metadata.UID)
					}
					row = &entries[i]
				}
				if e.Class == ClassOrphaned {
					t.Errorf("List: an ORPHANED row %+v; the unreadable VM's files are not orphans", e)
				}
			}
			if row == nil || row.Class != ClassUnreadable || !strings.Contains(row.Message, path) {
				t.Errorf("List: got row %+v; want an UNREADABLE row naming %s", row, path)
			}
			if _, err := m.GC(ctx, true); err == nil {
				t.Error("GC: ran while a spec is unreadable")
			}
		})
	}
}

func probeUID(t *testing.T, spec []byte) string {
	t.Helper()
	var vm VirtualMachine
	if err := yaml.Unmarshal(spec, &vm); err != nil || vm.Metadata.UID == "" {
		t.Fatalf("probe spec: %v", err)
	}
	return vm.Metadata.UID
}

// Specs written before the store framed them have no header and no
// trailer: they are read as they are.
func TestStoreReadsUnframedSpec(t *testing.T) {
	t.Parallel()
	s := store{layout: newTestLayout(t)}
	vm := kernelVM("old", "/k")
	Defaults(vm)
	vm.Metadata.UID = testUID
	b, err := encodeVM(vm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.layout.VMStateDir(testUID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.specPath(testUID), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := s.load(testUID); err != nil || got.Metadata.Name != "old" {
		t.Errorf("load of an unframed spec: got %v, %v", got, err)
	}
}

// Unknown values are null in JSON, never a made-up zero.
func TestEntryJSONNulls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		e    Entry
		want map[string]any
	}{
		{"stopped", Entry{Name: "a", UID: testUID, Class: ClassManaged, Phase: PhaseStopped, CPUs: 2, MemoryMiB: 512, Generation: 1},
			map[string]any{"name": "a", "pid": nil, "accel": nil, "cpus": 2.0, "memoryMiB": 512.0, "generation": 1.0, "observedGeneration": nil}},
		{"external", Entry{Name: "ext", UID: testUID, Class: ClassExternal, Phase: PhaseRunning, PID: 7, Accel: "tcg"},
			map[string]any{"pid": 7.0, "cpus": nil, "memoryMiB": nil, "generation": nil, "accel": "tcg"}},
		{"orphan file", Entry{Class: ClassOrphaned, Phase: PhaseStopped, Path: "/x"},
			map[string]any{"name": nil, "uid": nil, "path": "/x"}},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.e)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for k, want := range tt.want {
			if v, ok := got[k]; !ok || v != want {
				t.Errorf("%s: %s: got %v (present %v); want %v\n%s", tt.name, k, v, ok, want, b)
			}
		}
		var back Entry
		if err := json.Unmarshal(b, &back); err != nil || back != tt.e {
			t.Errorf("%s: round trip: got %+v, %v; want %+v", tt.name, back, err, tt.e)
		}
		y, err := yaml.Marshal(tt.e)
		if err != nil || (tt.e.PID == 0 && !strings.Contains(string(y), "pid: null")) {
			t.Errorf("%s: YAML: got %s, %v; want pid: null", tt.name, y, err)
		}
	}
}

func TestArgvSizes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		argv      []string
		cpus, mib int
	}{
		{[]string{"qemu"}, 1, 128},
		{[]string{"qemu", "-smp", "4", "-m", "2048"}, 4, 2048},
		{[]string{"qemu", "-smp", "cpus=3,sockets=1", "-m", "2G"}, 3, 2048},
		{[]string{"qemu", "-smp", "sockets=2,cores=2,threads=2", "-m", "size=1024M,slots=2,maxmem=4G"}, 8, 1024},
		{[]string{"qemu", "-smp", "x", "-m", "lots"}, 0, 0},
	}
	for _, tt := range tests {
		if c, m := argCPUs(tt.argv), argMemoryMiB(tt.argv); c != tt.cpus || m != tt.mib {
			t.Errorf("%v: got %d CPUs %d MiB; want %d %d", tt.argv, c, m, tt.cpus, tt.mib)
		}
	}
}

// A manifest copied from `virt vm show` carries the user data masked; the
// mask stands for stored user data and is never stored itself (issue 9,
// item 5).
func TestUserDataMaskNeedsStoredUserData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, _, _ := newTestManager(t)
	kernel := testKernel(t)
	masked := func(name string) *VirtualMachine {
		vm := kernelVM(name, kernel)
		vm.Spec.CloudInit = &CloudInit{UserData: redact.Mask}
		return vm
	}
	isMaskErr := func(err error) bool {
		var ve *ValidationError
		return errors.As(err, &ve) && ve.Errs[0].Field == "spec.cloudInit.userData"
	}
	// a new VM (apply of a copy under a new name, or create)
	if _, err := m.Apply(ctx, masked("ci4")); !isMaskErr(err) {
		t.Errorf("Apply of a new VM with the mask: got %v; want a spec.cloudInit.userData error", err)
	}
	if _, err := m.Create(ctx, masked("ci5")); !isMaskErr(err) {
		t.Errorf("Create with the mask: got %v; want a spec.cloudInit.userData error", err)
	}
	// an existing VM without user data
	mustCreate(t, m, kernelVM("plain", kernel))
	if _, err := m.Apply(ctx, masked("plain")); !isMaskErr(err) {
		t.Errorf("Apply of the mask to a VM without user data: got %v; want refused", err)
	}
	// an existing VM with user data: the mask keeps it
	withUD := kernelVM("ud", kernel)
	withUD.Spec.CloudInit = &CloudInit{UserData: "#cloud-config\n{}\n"}
	mustCreate(t, m, withUD)
	res, err := m.Apply(ctx, masked("ud"))
	if err != nil || res.VM.Spec.CloudInit.UserData != "#cloud-config\n{}\n" {
		t.Errorf("Apply of the mask to a VM with user data: got %+v, %v; want the stored user data kept", res, err)
	}
}

// `vm show` of a guest that `vm list` shows but virtcon does not manage
// gives what is known of it; every action on it is refused as not ours.
func TestGetExternal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newHostFixture(t)
	for _, ref := range []string{"ext", uidExternal, "win"} {
		v, e, err := f.m.Get(ctx, ref)
		if err != nil || v != nil || e == nil || e.Class != ClassExternal {
			t.Errorf("Get(%q): got %v, %+v, %v; want no manifest and an EXTERNAL entry", ref, v, e, err)
		}
	}
	if _, e, _ := f.m.Get(ctx, "ext"); e == nil || e.PID != 401 || e.Accel != "kvm" || e.CPUs != 1 || e.MemoryMiB != 128 {
		t.Errorf("Get(ext): got %+v; want pid 401, kvm, QEMU's default 1 CPU and 128 MiB", e)
	}
	if err := f.m.Start(ctx, "ext"); !errors.Is(err, ErrNotOurs) {
		t.Errorf("Start(ext): got %v; want ErrNotOurs", err)
	}
	if err := f.m.Delete(ctx, "win", true); !errors.Is(err, ErrNotOurs) {
		t.Errorf("Delete(win): got %v; want ErrNotOurs", err)
	}
	if _, _, err := f.m.Get(ctx, "nosuch"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(nosuch): got %v; want ErrNotFound", err)
	}
}

// spec.startup orders the boot's starts; an empty one is none.
func TestStartupAdmission(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	kernel := testKernel(t)
	ok := kernelVM("s1", kernel)
	d := duration.Duration(30 * time.Second)
	ok.Spec.Autostart, ok.Spec.Startup = true, &Startup{Order: 2, Delay: &d}
	got := mustCreate(t, m, ok)
	if got.Spec.StartupOrder() != 2 || got.Spec.StartupDelay() != 30*time.Second {
		t.Errorf("startup: got %+v", got.Spec.Startup)
	}
	empty := kernelVM("s2", kernel)
	empty.Spec.Startup = &Startup{}
	if got := mustCreate(t, m, empty); got.Spec.Startup != nil {
		t.Errorf("an empty startup: got %+v; want none", got.Spec.Startup)
	}
	long := duration.Duration(2 * time.Hour)
	for _, st := range []*Startup{{Order: -1}, {Order: 10000}, {Delay: &long}} {
		v := kernelVM("s3", kernel)
		v.Spec.Startup = st
		var ve *ValidationError
		if _, err := m.Create(context.Background(), v); !errors.As(err, &ve) || !strings.HasPrefix(ve.Errs[0].Field, "spec.startup.") {
			t.Errorf("startup %+v: got %v; want a spec.startup field error", st, err)
		}
	}
	// the manifest reads and writes it
	vm, err := Decode([]byte("apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: s4}\nspec: {autostart: true, startup: {order: 1, delay: 10}, boot: {kernel: " + kernel + "}}\n"))
	if err != nil || vm.Spec.StartupDelay() != 10*time.Second {
		t.Errorf("Decode: %+v, %v", vm, err)
	}
}
