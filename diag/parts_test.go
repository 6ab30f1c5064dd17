package diag

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/paths"
)

// TestHostPartsUseTheGivenProbe: checks.json runs the probe it is given
// (the DCUI passes the per-boot cache), and the bundle holds the parts
// `virt diagnostics` documents.
func TestHostPartsUseTheGivenProbe(t *testing.T) {
	var calls atomic.Int32
	probe := func(context.Context, string) kvmprobe.Result {
		calls.Add(1)
		return kvmprobe.Result{Stage: kvmprobe.StageOpen, Error: "fake probe"}
	}
	parts := HostParts(hostinfo.CheckOptions{Options: hostinfo.Options{Root: fakehost.Tree(t, "intel-iommu"), Logger: testutil.Logger(t)}, Probe: probe})
	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "versions.json,inventory.json,checks.json" {
		t.Fatalf("parts %s; want versions.json,inventory.json,checks.json", got)
	}
	res, err := WriteInDir(context.Background(), testutil.Logger(t), t.TempDir(), time.Now(), parts)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(res.Files, ","); got != "versions.json,inventory.json,checks.json,errors.json" {
		t.Errorf("bundle files %s; want the three parts and errors.json", got)
	}
	if calls.Load() != 1 {
		t.Errorf("probe ran %d times; want 1 (the given ProbeFunc, once)", calls.Load())
	}
}

func TestFileName(t *testing.T) {
	at := time.Date(2026, 3, 14, 10, 26, 53, 0, time.FixedZone("CET", 3600))
	if got, want := FileName(at), "virtcon-diagnostics-20260314T092653Z.tar.gz"; got != want {
		t.Errorf("FileName = %q; want %q (UTC)", got, want)
	}
	if got, want := Dir(paths.New("/x")), "/x/var/lib/virtcon/diagnostics"; got != want {
		t.Errorf("Dir = %q; want %q", got, want)
	}
}

func TestWriteInDirModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "diagnostics")
	// an existing, too open directory is tightened
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)
	parts := []Part{{Name: "a.json", Collect: func(context.Context) (any, error) { return map[string]int{"a": 1}, nil }}}
	res, err := WriteInDir(context.Background(), testutil.Logger(t), dir, now, parts)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "virtcon-diagnostics-20260314T092653Z.tar.gz"); res.Path != want {
		t.Errorf("path %q; want %q", res.Path, want)
	}
	st, err := os.Stat(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != res.Size || res.Size == 0 {
		t.Errorf("file mode %v size %d (result says %d); want 0600 and the same non-zero size", st.Mode().Perm(), st.Size(), res.Size)
	}
	dst, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dst.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v; want 0700", dst.Mode().Perm())
	}
}

func TestWriteInDirError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := WriteInDir(context.Background(), testutil.Logger(t), filepath.Join(file, "diagnostics"), time.Now(), nil)
	if err == nil || !strings.Contains(err.Error(), "not-a-dir") {
		t.Errorf("error %v; want one naming the path", err)
	}
}
