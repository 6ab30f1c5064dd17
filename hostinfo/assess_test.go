package hostinfo

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
)

// The rule for the KVM probe lives here: a fresh check runs it, a
// non-fresh one answers from this boot's cache; only a fresh check of the
// live host remembers the verdict (a fixture's boot is not this one).
func TestAssessorProbeRule(t *testing.T) {
	t.Parallel()
	root := fixtureRoot("pvm-build")
	cache := filepath.Join(t.TempDir(), "acceleration.json")
	calls := 0
	a := NewAssessor(Options{Root: root}, cache)
	a.probe = func(_ context.Context, dev string) kvmprobe.Result {
		calls++
		r := probePVMSlow
		r.Device = dev
		return r
	}
	if _, rep, err := a.Check(context.Background(), CheckRequest{Fresh: true}); err != nil || rep.Acceleration != AccelTCG {
		t.Fatalf("fresh check: %v, %+v", err, rep)
	}
	if calls != 1 {
		t.Errorf("fresh check: %d probes; want 1", calls)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Error("a check of a fixture root wrote this host's verdict cache")
	}
	// not fresh, and no cache of this boot: the probe runs as the fallback
	if _, _, err := a.Check(context.Background(), CheckRequest{}); err != nil || calls != 2 {
		t.Errorf("cached check without a cache: %v after %d probes; want the fallback probe", err, calls)
	}
}

// On the live host a cached check with a cold cache runs the probe once
// and remembers it: the screens that refresh do not run guest code again.
func TestAssessorRemembersOnColdCache(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skipf("needs a boot id: %v", err)
	}
	cache := filepath.Join(t.TempDir(), "acceleration.json")
	calls := 0
	a := NewAssessor(Options{Root: "/"}, cache)
	a.probe = func(_ context.Context, dev string) kvmprobe.Result {
		calls++
		r := probePVMSlow
		r.Device = dev
		return r
	}
	for range 3 {
		if _, _, err := a.Check(context.Background(), CheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Errorf("three cached checks on a cold cache: %d probes; want 1", calls)
	}
	if accel, _ := a.Acceleration(context.Background()); accel != AccelTCG || calls != 1 {
		t.Errorf("Acceleration after: %s after %d probes; want tcg from the cache", accel, calls)
	}
}
