//go:build integration

package kvmprobe

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestVerdictOnThisHost checks the verdict against what is known about the
// host: kvm_pvm (pagetable-based KVM inside a nested VM) must fail; kvm_intel
// or kvm_amd on bare metal (no "hypervisor" CPU flag) must pass.
// Run with: go test -tags integration -run TestVerdictOnThisHost ./hostinfo/kvmprobe/
func TestVerdictOnThisHost(t *testing.T) {
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	pvm := exists("/sys/module/kvm_pvm")
	hw := exists("/sys/module/kvm_intel") || exists("/sys/module/kvm_amd")
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("cannot read /proc/cpuinfo:", err)
	}
	virtualised := false
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			for _, f := range strings.Fields(v) {
				virtualised = virtualised || f == "hypervisor"
			}
		}
	}
	if !pvm && !(hw && !virtualised) {
		t.Skipf("no expectation for this host (kvm_pvm=%v, kvm_intel/amd=%v, hypervisor flag=%v)", pvm, hw, virtualised)
	}
	if f, err := os.OpenFile(DefaultDevice, os.O_RDWR, 0); err != nil {
		t.Skipf("%s not usable here: %v", DefaultDevice, err)
	} else {
		_ = f.Close()
	}

	r := Run(context.Background(), Options{Timeout: 5 * time.Second})
	ok, reason := r.Verdict()
	t.Logf("stage %q, %.3g iter/s, elapsed %v: ok=%v: %s", r.Stage, r.ItersPerSec, time.Duration(r.ElapsedNanos), ok, reason)
	switch {
	case pvm && ok:
		t.Errorf("kvm_pvm host judged fast: %s", reason)
	case !pvm && !ok:
		t.Errorf("bare-metal %s host judged not usable: %s", map[bool]string{true: "KVM"}[hw], reason)
	}
}
