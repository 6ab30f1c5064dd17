package hostinfo

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
)

func TestCachedProbe(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	boot := filepath.Join(root, "proc/sys/kernel/random")
	if err := os.MkdirAll(boot, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(boot, "boot_id"), []byte("boot-1\n"), 0o644)
	cache := filepath.Join(root, "run/virtcon/acceleration.json")
	cached := kvmprobe.Result{Stage: kvmprobe.StageDone, APIVersion: 12, ItersPerSec: 3e9}
	if err := SaveAccelCache(cache, AccelCache{BootID: "boot-1", Acceleration: AccelKVM, CheckedAt: time.Now(), Probe: &cached}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	fallback := func(context.Context, string) kvmprobe.Result {
		calls++
		return kvmprobe.Result{Stage: kvmprobe.StageOpen}
	}
	probe := CachedProbe(Options{Root: root}, cache, fallback)
	if got := probe(context.Background(), "/dev/kvm"); got.ItersPerSec != 3e9 || calls != 0 {
		t.Errorf("with a cache of this boot: got %+v after %d fallback calls; want the cached result and none", got, calls)
	}
	// another boot: the cache is stale and the probe runs again
	os.WriteFile(filepath.Join(boot, "boot_id"), []byte("boot-2\n"), 0o644)
	if got := probe(context.Background(), "/dev/kvm"); got.Stage != kvmprobe.StageOpen || calls != 1 {
		t.Errorf("with a stale cache: got %+v after %d fallback calls; want the fallback's result", got, calls)
	}
}
