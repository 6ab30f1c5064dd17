package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// importQcow2 makes a blank qcow2 of size with qemu-img and imports it.
func importQcow2(t *testing.T, m *Manager, qemuImg, name, size string) *Image {
	t.Helper()
	src := filepath.Join(t.TempDir(), name+".qcow2")
	if out, err := exec.Command(qemuImg, "create", "-q", "-f", "qcow2", src, size).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	img, err := m.ImportImage(context.Background(), src, name)
	if err != nil {
		t.Fatalf("ImportImage(%s): %v", name, err)
	}
	return img
}

// An image whose user cannot be told (an unreadable spec) is never
// removed, nor listed as unused; nor is one that a disk file without a
// spec still uses as its base.
func TestRemoveImageFailsClosed(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	ctx := context.Background()
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	base := importQcow2(t, m, qemuImg, "base", "1M")
	db := mustCreate(t, m, &VirtualMachine{Metadata: Metadata{Name: "db"}, Spec: Spec{Disks: []Disk{{Name: "root", Image: "base"}}}})
	spec := filepath.Join(m.layout().VMStateDir(db.Metadata.UID), "vm.yaml")
	good, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, nil, 0o600); err != nil { // truncated
		t.Fatal(err)
	}
	err = m.RemoveImage(ctx, "base")
	if !errors.Is(err, ErrUsageUnknown) || !strings.Contains(err.Error(), spec) {
		t.Errorf("RemoveImage with an unreadable spec: got %v; want ErrUsageUnknown naming %s", err, spec)
	}
	if _, err := os.Stat(base.Path + ".sha256"); err != nil {
		t.Errorf("marker after the refusal: %v; want it kept", err)
	}
	imgs, err := m.ListImages(ctx)
	if !errors.Is(err, ErrUsageUnknown) || !strings.Contains(err.Error(), spec) {
		t.Errorf("ListImages with an unreadable spec: got error %v; want ErrUsageUnknown naming %s", err, spec)
	}
	if len(imgs) != 1 || imgs[0].Name != "base" || imgs[0].UsedBy != nil {
		t.Errorf("ListImages with an unreadable spec: got %+v; want base with usedBy unknown (nil)", imgs)
	}
	if b, _ := json.Marshal(imgs); !strings.Contains(string(b), `"usedBy":null`) {
		t.Errorf("JSON: got %s; want usedBy null", b)
	}

	// the spec is gone but the VM's overlay stays: its base is still needed
	if err := os.Remove(spec); err != nil {
		t.Fatal(err)
	}
	disk := m.diskPath(db.Metadata.UID, "root")
	if err := m.RemoveImage(ctx, "base"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), disk) {
		t.Errorf("RemoveImage with an overlay left: got %v; want ErrInUse naming %s", err, disk)
	}
	if imgs, err := m.ListImages(ctx); err != nil || len(imgs) != 1 || !reflect.DeepEqual(imgs[0].UsedBy, []string{}) {
		t.Errorf("ListImages without the spec: got %+v, %v; want base, used by no VM", imgs, err)
	}

	// the spec back: refused, in use by db; once db is gone, removed
	if err := os.WriteFile(spec, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveImage(ctx, "base"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "db") {
		t.Errorf("RemoveImage in use: got %v; want ErrInUse naming db", err)
	}
	if err := m.Delete(ctx, "db", false); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveImage(ctx, "base"); err != nil {
		t.Errorf("RemoveImage unused: %v", err)
	}
}

// The cause of an unreadable spec survives the wrapping, so the CLI maps
// a permission problem to exit 4.
func TestUsageErrorUnwraps(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("image %q: not removed: %w", "base", &usageError{[]error{
		errors.New("vm a: spec /x/a/vm.yaml: empty"),
		fmt.Errorf("vm b: spec /x/b/vm.yaml: %w", fs.ErrPermission),
	}})
	if !errors.Is(err, ErrUsageUnknown) || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("got %v; want it to wrap ErrUsageUnknown and fs.ErrPermission", err)
	}
	for _, w := range []string{"/x/a/vm.yaml", "/x/b/vm.yaml", ErrUsageUnknown.Error()} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("got %q; want it to name %q", err, w)
		}
	}
}

func TestDiskSmallerThanImage(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	ctx := context.Background()
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	small := importQcow2(t, m, qemuImg, "small", "64M")
	if small.VirtualSizeBytes == nil || *small.VirtualSizeBytes != 64<<20 {
		t.Fatalf("virtual size: got %v; want 64 MiB recorded at import", small.VirtualSizeBytes)
	}
	// a marker from before the virtual size was recorded: qemu-img tells
	old := importQcow2(t, m, qemuImg, "old", "64M")
	b, _ := json.Marshal(imageMarker{Name: "old", Format: "qcow2", SHA256: old.SHA256, SizeBytes: old.SizeBytes, Source: old.Source, AddedAt: old.AddedAt})
	if err := os.WriteFile(old.Path+".sha256", b, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		image, size string
		wantErr     string // "" when accepted
	}{
		{"small", "32M", `spec.disks[0].size: is 32 MiB, smaller than image "small" (64 MiB): use at least 64 MiB, or leave size unset to take the image's size (got "32M")`},
		{"small", "67108863", `spec.disks[0].size: is 67108863 bytes, smaller than image "small" (64 MiB)`},
		{"old", "1M", `spec.disks[0].size: is 1 MiB, smaller than image "old" (64 MiB)`},
		{"small", "64M", ""},
		{"small", "1G", ""},
		{"small", "", ""},
	}
	for i, tt := range tests {
		name := fmt.Sprintf("d%d", i)
		_, err := m.Create(ctx, &VirtualMachine{Metadata: Metadata{Name: name}, Spec: Spec{Disks: []Disk{{Name: "root", Image: tt.image, Size: tt.size}}}})
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("disk %q on %s: %v; want it accepted", tt.size, tt.image, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("disk %q on %s: got %v; want a *ValidationError containing %q", tt.size, tt.image, err, tt.wantErr)
		}
		if _, err := m.find(name); !errors.Is(err, ErrNotFound) {
			t.Errorf("refused VM %s: got %v; want nothing stored", name, err)
		}
	}
	if got := dirEntries(t, filepath.Join(m.layout().StateDir(), "vms")); len(got) != 3 {
		t.Errorf("VM directories: got %q; want only the 3 accepted VMs", got)
	}

	// apply adding a disk: the index is the one in the applied spec
	in := &VirtualMachine{Metadata: Metadata{Name: "d3"}, Spec: Spec{Disks: []Disk{{Name: "root", Image: "small", Size: "64M"}, {Name: "data", Image: "small", Size: "16M"}}}}
	_, err := m.Apply(ctx, in)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `spec.disks[1].size: is 16 MiB, smaller than image "small" (64 MiB)`) {
		t.Errorf("Apply adding a small disk: got %v; want spec.disks[1].size refused", err)
	}
	vm, err := m.find("d3")
	if err != nil || len(vm.Spec.Disks) != 1 || vm.Metadata.Generation != 1 {
		t.Errorf("after the refused apply: got %+v, %v; want d3 unchanged", vm, err)
	}
	if _, err := os.Stat(m.diskPath(vm.Metadata.UID, "data")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused disk file: %v; want none made", err)
	}
	in.Spec.Disks[1].Size = "64M"
	if _, err := m.Apply(ctx, in); err != nil {
		t.Errorf("Apply adding a big enough disk: %v", err)
	}
}

func TestSizeString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n    int64
		want string
	}{{0, "0 bytes"}, {512, "512 bytes"}, {4096, "4 KiB"}, {64 << 20, "64 MiB"}, {64<<20 - 1, "67108863 bytes"}, {3 << 29, "1536 MiB"}, {2 << 40, "2 TiB"}} {
		if got := sizeString(tt.n); got != tt.want {
			t.Errorf("sizeString(%d) = %q; want %q", tt.n, got, tt.want)
		}
	}
}

// Leftovers of interrupted pulls and imports are listed as ORPHANED, by
// name and path, never as a usable image or a nameless row.
func TestListImagesOrphans(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t) // no qemu-img: every size is known without it
	ctx := context.Background()
	dir := m.layout().ImagesDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("good.img", make([]byte, 8192))
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	mk, _ := json.Marshal(imageMarker{Name: "good", Format: "raw", SHA256: strings.Repeat("ab", 32), SizeBytes: 8192, VirtualSizeBytes: 8192, Source: "file:///x", AddedAt: at})
	write("good.img.sha256", mk)
	write(".half.img.partial", []byte("half a download"))
	write("lone.img", []byte("no marker"))
	write("unrelated.txt", []byte("not ours to list"))

	imgs, err := m.ListImages(ctx)
	if err != nil {
		t.Fatalf("ListImages: %v", err)
	}
	vsize := int64(8192)
	want := []Image{
		{Name: "good", Class: ClassManaged, Path: filepath.Join(dir, "good.img"), Format: "raw", SHA256: strings.Repeat("ab", 32), SizeBytes: 8192, VirtualSizeBytes: &vsize, Source: "file:///x", AddedAt: at, UsedBy: []string{}},
		{Name: "half", Class: ClassOrphaned, Path: filepath.Join(dir, ".half.img.partial"), SizeBytes: 15, UsedBy: []string{}},
		{Name: "lone", Class: ClassOrphaned, Path: filepath.Join(dir, "lone.img"), SizeBytes: 9, UsedBy: []string{}},
	}
	if len(imgs) != len(want) {
		t.Fatalf("ListImages: got %+v; want %d rows", imgs, len(want))
	}
	for i := range want {
		got := imgs[i]
		got.AllocatedBytes, got.Message, got.Reason = 0, "", "" // the file system's to say; prose; checked below
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("row %d: got %+v; want %+v", i, got, want[i])
		}
		if want[i].Class == ClassOrphaned && (imgs[i].Reason != ReasonIncomplete || !strings.Contains(imgs[i].Message, "garbage collection removes it")) {
			t.Errorf("row %d: reason %q, message %q; want %s and to say what removes it", i, imgs[i].Reason, imgs[i].Message, ReasonIncomplete)
		}
	}
	if _, err := m.image("lone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an image without a marker: got %v; want it unusable (ErrNotFound)", err)
	}
	b, _ := json.Marshal(imgs[1])
	for _, absent := range []string{`"format"`, `"sha256"`, `"source"`, `"addedAt"`} {
		if strings.Contains(string(b), absent) {
			t.Errorf("orphan JSON %s: want no %s", b, absent)
		}
	}
	if !strings.Contains(string(b), `"virtualSizeBytes":null`) || !strings.Contains(string(b), `"class":"ORPHANED"`) {
		t.Errorf("orphan JSON %s: want class ORPHANED and virtualSizeBytes null", b)
	}
}

// qemu-img's own words reach the user.
func TestInspectImageCarriesStderr(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	bad := filepath.Join(t.TempDir(), "bad.qcow2")
	// a qcow2 magic with an impossible version
	if err := os.WriteFile(bad, append([]byte("QFI\xfb\x00\x00\x00\x09"), make([]byte, 504)...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := m.ImportImage(context.Background(), bad, "bad")
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("ImportImage of a broken qcow2: got %v; want qemu-img's reason naming %s", err, bad)
	}
	if strings.Contains(fmt.Sprint(err), "/dev/fd/") {
		t.Errorf("ImportImage: got %v; want the user's path, not /dev/fd", err)
	}
	if _, err := m.inspectImage(context.Background(), "/nonexistent.img", nil); err == nil || !strings.Contains(err.Error(), "No such file") {
		t.Errorf("inspectImage(/nonexistent.img): got %v; want qemu-img's stderr", err)
	}
}
