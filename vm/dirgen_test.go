package vm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The two generations: a director-created VM carries the director's
// opaque generation as a reserved label that the host keeps untouched,
// while local edits bump only metadata.generation.
func TestDirectorGenerationLabel(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	kernel := testKernel(t)
	field := "metadata.labels[" + LabelDirectorGeneration + "]"

	// On create the label is the director's: a manifest cannot carry it.
	in := kernelVM("forged", kernel)
	in.Metadata.Labels = map[string]string{LabelDirectorGeneration: "1"}
	if _, err := m.Create(ctx, in); err == nil {
		t.Fatal("create with a virtcon.io/ label: got nil error; want it refused")
	} else {
		checkFieldError(t, err, field, LabelDirectorGeneration)
	}
	if _, err := m.CreateWith(ctx, kernelVM("badgen", kernel), CreateOptions{DirectorGeneration: "not a value"}); err == nil {
		t.Error("create with generation \"not a value\": got nil error; want it refused")
	} else {
		checkFieldError(t, err, field, `"not a value"`)
	}
	if got := dirEntries(t, m.layout().StateDir()+"/vms"); len(got) != 0 {
		t.Fatalf("refused creates left %v in the store; want nothing", got)
	}

	plain := mustCreate(t, m, kernelVM("local", kernel))
	in = kernelVM("web", kernel)
	in.Metadata.Labels = map[string]string{"tier": "front"}
	created, err := m.CreateWith(ctx, in, CreateOptions{DirectorGeneration: "1"})
	if err != nil {
		t.Fatalf("CreateWith(generation 1): %v", err)
	}
	uid := created.Metadata.UID
	if g, l := created.Metadata.Labels[LabelDirectorGeneration], created.Metadata.Labels["tier"]; g != "1" || l != "front" {
		t.Fatalf("created labels: got %v; want the generation 1 and tier front", created.Metadata.Labels)
	}

	// Entry: List, Peek and Get fill it; JSON has it, null when absent.
	entries, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Entry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	if got := byName["web"].DirectorGeneration; got != "1" {
		t.Errorf("List: web's DirectorGeneration: got %q; want \"1\"", got)
	}
	if got := byName["local"].DirectorGeneration; got != "" {
		t.Errorf("List: local's DirectorGeneration: got %q; want \"\"", got)
	}
	if e, err := m.Peek(ctx, "web"); err != nil || e.DirectorGeneration != "1" {
		t.Errorf("Peek(web): got %+v, %v; want DirectorGeneration \"1\"", e, err)
	}
	if _, e, err := m.Get(ctx, "web"); err != nil || e.DirectorGeneration != "1" {
		t.Errorf("Get(web): got %+v, %v; want DirectorGeneration \"1\"", e, err)
	}
	for _, c := range []struct {
		e    Entry
		want any
	}{{byName["web"], "1"}, {byName["local"], nil}} {
		b, _ := json.Marshal(c.e)
		var row map[string]any
		if err := json.Unmarshal(b, &row); err != nil {
			t.Fatal(err)
		}
		if v, ok := row["directorGeneration"]; !ok || v != c.want {
			t.Errorf("%s JSON: directorGeneration: got %v (present %v); want %v", c.e.Name, v, ok, c.want)
		}
		var back Entry
		if err := json.Unmarshal(b, &back); err != nil || back.DirectorGeneration != c.e.DirectorGeneration {
			t.Errorf("%s JSON round trip: got %q, %v; want %q", c.e.Name, back.DirectorGeneration, err, c.e.DirectorGeneration)
		}
	}

	// `virt vm show -o yaml` of the director-created VM, as the user sees it.
	shown, _, err := m.Get(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	shownYAML, err := yaml.Marshal(shown)
	if err != nil {
		t.Fatal(err)
	}
	manifest := func(edit func(*VirtualMachine)) func(t *testing.T) *VirtualMachine {
		return func(t *testing.T) *VirtualMachine {
			t.Helper()
			v, err := Decode(shownYAML)
			if err != nil {
				t.Fatalf("Decode(show output): %v\n%s", err, shownYAML)
			}
			if edit != nil {
				edit(v)
			}
			return v
		}
	}
	setLabel := func(k, v string) func(*VirtualMachine) {
		return func(vm *VirtualMachine) { vm.Metadata.Labels[k] = v }
	}
	// Steps run in order on the same VM.
	steps := []struct {
		name       string
		in         func(t *testing.T) *VirtualMachine
		wantErr    string // a field whose error is wanted; "" when it is applied
		wantValue  string // the value that error names
		wantAction string
		wantGen    int64
		wantLabels map[string]string
	}{
		{name: "show then apply round trip", in: manifest(nil),
			wantAction: "unchanged", wantGen: 1, wantLabels: map[string]string{LabelDirectorGeneration: "1", "tier": "front"}},
		{name: "another director generation refused", in: manifest(setLabel(LabelDirectorGeneration, "7")),
			wantErr: field, wantValue: `"7"`, wantGen: 1, wantLabels: map[string]string{LabelDirectorGeneration: "1", "tier": "front"}},
		{name: "another reserved label refused", in: manifest(setLabel(ReservedLabelPrefix+"owner", "me")),
			wantErr: "metadata.labels[" + ReservedLabelPrefix + "owner]", wantValue: ReservedLabelPrefix + "owner", wantGen: 1,
			wantLabels: map[string]string{LabelDirectorGeneration: "1", "tier": "front"}},
		{name: "spec change without the label keeps it", in: manifest(func(vm *VirtualMachine) {
			delete(vm.Metadata.Labels, LabelDirectorGeneration)
			vm.Spec.MemoryMiB = 1024
		}), wantAction: "configured", wantGen: 2, wantLabels: map[string]string{LabelDirectorGeneration: "1", "tier": "front"}},
		{name: "user label change does not bump the generation", in: manifest(func(vm *VirtualMachine) {
			vm.Metadata.Labels = map[string]string{"tier": "back"}
			vm.Spec.MemoryMiB = 1024
		}), wantAction: "configured", wantGen: 2, wantLabels: map[string]string{LabelDirectorGeneration: "1", "tier": "back"}},
		{name: "no labels at all keeps the reserved one", in: manifest(func(vm *VirtualMachine) {
			vm.Metadata.Labels = nil
			vm.Spec.MemoryMiB = 1024
		}), wantAction: "configured", wantGen: 2, wantLabels: map[string]string{LabelDirectorGeneration: "1"}},
	}
	for _, s := range steps {
		res, err := m.Apply(ctx, s.in(t))
		switch {
		case s.wantErr != "":
			checkFieldError(t, err, s.wantErr, s.wantValue)
		case err != nil:
			t.Errorf("%s: Apply: %v", s.name, err)
		case res.Action != s.wantAction:
			t.Errorf("%s: action: got %q; want %q", s.name, res.Action, s.wantAction)
		}
		stored, err := m.store.load(uid)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Metadata.Generation != s.wantGen {
			t.Errorf("%s: metadata.generation: got %d; want %d", s.name, stored.Metadata.Generation, s.wantGen)
		}
		if !equalLabels(stored.Metadata.Labels, s.wantLabels) {
			t.Errorf("%s: labels: got %v; want %v", s.name, stored.Metadata.Labels, s.wantLabels)
		}
	}
	// A local VM still cannot be given the label by apply.
	local, _, err := m.Get(ctx, plain.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	local.Metadata.Labels = map[string]string{LabelDirectorGeneration: "1"}
	if _, err := m.Apply(ctx, local); err == nil {
		t.Error("apply adding the label to a local VM: got nil error; want it refused")
	} else {
		checkFieldError(t, err, field, LabelDirectorGeneration)
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A manifest from the director boots only from files in the images
// directory: a director must not point a guest at /etc/shadow.
func TestCreateRemoteBootPaths(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	images := m.layout().ImagesDir()
	if err := os.MkdirAll(images, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(p string) string {
		t.Helper()
		if err := os.WriteFile(p, []byte("not really a kernel"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inside := write(filepath.Join(images, "vmlinuz"))
	initrd := write(filepath.Join(images, "initrd.img"))
	outside := testKernel(t)
	link := filepath.Join(images, "shadow-link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(images, "..", "escape"))
	goodLink := filepath.Join(images, "good-link")
	if err := os.Symlink(inside, goodLink); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name           string
		kernel, initrd string
		remote         bool
		wantField      string // "" when admitted
		wantValue      string
	}{
		{name: "inside", kernel: inside, initrd: initrd, remote: true},
		{name: "link inside to inside", kernel: goodLink, remote: true},
		{name: "outside", kernel: outside, remote: true, wantField: "spec.boot.kernel", wantValue: outside},
		{name: "initrd outside", kernel: inside, initrd: outside, remote: true, wantField: "spec.boot.initrd", wantValue: outside},
		{name: "link inside to outside", kernel: link, remote: true, wantField: "spec.boot.kernel", wantValue: outside},
		{name: "dot-dot out", kernel: images + "/../escape", remote: true, wantField: "spec.boot.kernel", wantValue: "escape"},
		{name: "missing", kernel: filepath.Join(images, "nope"), remote: true, wantField: "spec.boot.kernel", wantValue: "nope"},
		{name: "the images dir itself", kernel: images, remote: true, wantField: "spec.boot.kernel", wantValue: images},
		{name: "local outside", kernel: outside},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := kernelVM("r"+strings.Repeat("x", i), c.kernel)
			v.Spec.Boot.Initrd = c.initrd
			got, err := m.CreateWith(ctx, v, CreateOptions{Remote: c.remote, DirectorGeneration: "1"})
			if c.wantField == "" {
				if err != nil {
					t.Fatalf("CreateWith: %v", err)
				}
				if _, err := m.store.load(got.Metadata.UID); err != nil {
					t.Errorf("stored: %v", err)
				}
				return
			}
			checkFieldError(t, err, c.wantField, c.wantValue)
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("got %v; want ErrInvalid", err)
			}
			if _, err := m.Peek(ctx, v.Metadata.Name); !errors.Is(err, ErrNotFound) {
				t.Errorf("refused create: Peek: got %v; want ErrNotFound (nothing stored)", err)
			}
		})
	}
}
