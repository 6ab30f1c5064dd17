package fakehost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/testutil"
)

// Tree is the absolute path of the captured host tree
// hostinfo/testdata/hosts/<name> (intel-iommu, amd-ivrs-off, pvm-build,
// container: see its README.md), to pass as a host root. It fails t if
// there is no such tree.
func Tree(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(testutil.RepoRoot(t), "hostinfo", "testdata", "hosts", name)
	if _, err := os.Stat(filepath.Join(p, "proc")); err != nil {
		t.Fatalf("fixture host %q: %v", name, err)
	}
	return p
}

// CacheVerdict saves c as the per-boot KVM verdict in cacheFile (a
// layout's AccelCacheFile) for the boot of the host tree at root, so that
// whatever reads that tree's acceleration answers from the cache and never
// runs the probe.
func CacheVerdict(t testing.TB, cacheFile, root string, c hostinfo.AccelCache) {
	t.Helper()
	boot, err := os.ReadFile(filepath.Join(root, "proc", "sys", "kernel", "random", "boot_id"))
	if err != nil {
		t.Fatal(err)
	}
	c.BootID = strings.TrimSpace(string(boot))
	if err := hostinfo.SaveAccelCache(cacheFile, c); err != nil {
		t.Fatal(err)
	}
}
