package fakehost

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/internal/testutil"
)

func TestTree(t *testing.T) {
	for _, name := range []string{"intel-iommu", "amd-ivrs-off", "pvm-build", "container"} {
		p := Tree(t, name)
		if !filepath.IsAbs(p) || filepath.Base(p) != name {
			t.Errorf("Tree(%q) = %s; want an absolute path ending in the name", name, p)
		}
		if _, err := os.Stat(filepath.Join(p, "proc", "cpuinfo")); err != nil {
			t.Errorf("Tree(%q): %v", name, err)
		}
	}
	r := testutil.Record(t, func(tb testing.TB) { Tree(tb, "no-such-host") })
	if !r.Fatal {
		t.Errorf("an unknown tree: got %+v; want the test stopped", r)
	}
}

// TestCacheVerdict: the verdict saved for a tree's boot is what that
// tree's acceleration answers, without the probe.
func TestCacheVerdict(t *testing.T) {
	root := Tree(t, "intel-iommu")
	file := filepath.Join(t.TempDir(), "accel.json")
	CacheVerdict(t, file, root, hostinfo.AccelCache{Acceleration: hostinfo.AccelTCG, Reason: "cached by the test"})
	probe := func(context.Context, string) kvmprobe.Result {
		t.Error("the probe ran")
		return kvmprobe.Result{}
	}
	accel, reason := hostinfo.Acceleration(context.Background(), hostinfo.Options{Root: root}, file, probe)
	if accel != hostinfo.AccelTCG || reason != "cached by the test (cached for this boot)" {
		t.Errorf("Acceleration = %s, %q; want the cached verdict", accel, reason)
	}
}

// TestInventoriesAreCopies: a test may change what it got.
func TestInventoriesAreCopies(t *testing.T) {
	for name, f := range map[string]func() *hostinfo.Inventory{"Inventory": Inventory, "FullInventory": FullInventory} {
		a := f()
		*a.CPU.Sockets = 9
		a.NICs[0].Name = "changed"
		if b := f(); *b.CPU.Sockets != 2 || b.NICs[0].Name != "eno1" || b.Hostname != "esx-lab-01" {
			t.Errorf("%s: a second call saw the first one's changes", name)
		}
	}
}
