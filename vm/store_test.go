package vm

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
)

func newTestLayout(t *testing.T) paths.Layout { return paths.New(shortTempDir(t)) }

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o600) }

func TestStoreRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name     string
		userData string
		wantYAML bool // written as block YAML, not the JSON fallback
	}{
		{"cloud-config", "#cloud-config\npackages: [htop]\n", true},
		{"empty", "", true},
		{"leading spaces", "  indented\nnext\n", true},
		{"leading tab", "\t#cloud-config\n", false},
		{"leading tab and odd characters", "\tx\n\x7f\u0085\u2028\ufeff\U0001F600é<>&\x00\x1b\\\"", true}, // yaml.v3 double-quotes these itself
		{"leading tab and unicode", "\tx\né <>&\"\\\n", false},
		{"control characters", "a\x00b\x1b\x7f", true},
		{"invalid UTF-8", "\xff\xfe#!", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := store{layout: newTestLayout(t)}
			vm := &VirtualMachine{APIVersion: APIVersion, Kind: Kind,
				Metadata: Metadata{Name: "web", UID: testUID, Generation: 3, CreationTimestamp: &now, Labels: map[string]string{"a": "b"}},
				Spec: Spec{Boot: &Boot{Kernel: "/k", Cmdline: tt.userData}, CloudInit: &CloudInit{UserData: tt.userData, MetaData: tt.userData},
					Disks: []Disk{{Name: "d", Size: "1G"}}},
				Status: Status{Phase: PhaseStopped, ObservedGeneration: 2, StartedAt: &now, Message: tt.userData},
			}
			Defaults(vm)
			if err := s.save(vm); err != nil {
				t.Fatalf("save: %v", err)
			}
			got, err := s.load(testUID)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if !reflect.DeepEqual(got.Spec, vm.Spec) || got.Metadata.Name != "web" || got.Metadata.Generation != 3 ||
				!got.Metadata.CreationTimestamp.Equal(now) || !got.Status.StartedAt.Equal(now) || got.Status.Message != tt.userData ||
				!reflect.DeepEqual(got.Metadata.Labels, vm.Metadata.Labels) || got.Status.ObservedGeneration != 2 {
				t.Errorf("load: got %+v; want %+v", got, vm)
			}
			b, err := encodeVM(vm)
			if err != nil {
				t.Fatal(err)
			}
			if isYAML := bytes.HasPrefix(b, []byte("apiVersion: ")); isYAML != tt.wantYAML {
				t.Errorf("encoding: got block YAML %v; want %v\n%s", isYAML, tt.wantYAML, b)
			}
		})
	}
}

func TestStoreLoadRefuses(t *testing.T) {
	t.Parallel()
	s := store{layout: newTestLayout(t)}
	if _, err := s.load(testUID); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("load of a missing VM: got %v; want ErrNotFound", err)
	}
	other := &VirtualMachine{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: "x", UID: "00000000-0000-0000-0000-000000000001"}}
	if err := s.save(other); err != nil {
		t.Fatal(err)
	}
	// A spec stored under another VM's directory is not that VM.
	b, _ := encodeVM(other)
	if err := s.save(&VirtualMachine{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: "y", UID: testUID}}); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(s.specPath(testUID), b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.load(testUID); err == nil || !strings.Contains(err.Error(), "holds uid") {
		t.Errorf("load of a misplaced spec: got %v; want a uid mismatch", err)
	}
	vms, errs := s.list()
	if len(vms) != 1 || len(errs) != 1 {
		t.Errorf("list: got %d VMs, %d errors; want 1 and 1", len(vms), len(errs))
	}
}

// A spec corrupted by hand names the line that is bad (yaml.v3 alone
// names the line before it).
func TestStoreLoadCorruptNamesLine(t *testing.T) {
	t.Parallel()
	s := store{layout: newTestLayout(t)}
	v := &VirtualMachine{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: "web", UID: testUID},
		Spec: Spec{CPUs: 1, MemoryMiB: 128, Disks: []Disk{{Name: "root", Size: "1G"}}}}
	if err := s.save(v); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.specPath(testUID))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	bad := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "size: 1G") })
	if bad < 0 {
		t.Fatalf("no size line in\n%s", b)
	}
	lines[bad] = " " + strings.TrimLeft(lines[bad], " ") // indented less than its mapping
	if err := writeFile(s.specPath(testUID), []byte(strings.Join(lines, ""))); err != nil {
		t.Fatal(err)
	}
	_, err = s.load(testUID)
	if want := fmt.Sprintf("corrupt: line %d: ", bad+1); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("load of a spec bad at line %d:\n%s\ngot %v; want %q", bad+1, strings.Join(lines, ""), err, want)
	}
}
