//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/testutil"
)

func cpuHasFlag(t *testing.T, flag string) bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			for _, f := range strings.Fields(line) {
				if f == flag {
					return true
				}
			}
			return false
		}
	}
	return false
}

func parseReport(t *testing.T, r result) hostinfo.Report {
	t.Helper()
	var rep hostinfo.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\nstdout: %s\nstderr: %s", err, r.stdout, r.stderr)
	}
	return rep
}

// The checks on the real machine must tell the truth about KVM: on a PVM
// host (this project's build machines) /dev/kvm opens and KVM_CREATE_VM
// works, yet guests run ~1000x too slowly, so the probe must not PASS and
// the verdict must be tcg; on a bare-metal host with kvm_intel/kvm_amd the
// probe must PASS and the verdict be kvm.
func TestIntegrationHostCheckTellsTheTruth(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	root := t.TempDir()
	r := virt(t, nil, "host", "check", "-o", "json", "--root", root)
	rep := parseReport(t, r)
	if rep.Failed() != (r.code == 3) {
		t.Errorf("exit code %d but report failed=%t", r.code, rep.Failed())
	}
	if r.code != 0 && r.code != 3 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	probe, ok := rep.Check("kvm.probe")
	if !ok {
		t.Fatal("no kvm.probe check")
	}
	t.Logf("kvm.probe: %s %s; acceleration %s", probe.Status, probe.Detail, rep.Acceleration)
	pvm := fileExists("/sys/module/kvm_pvm")
	hwKVM := (fileExists("/sys/module/kvm_intel") || fileExists("/sys/module/kvm_amd")) && !cpuHasFlag(t, "hypervisor")
	switch {
	case !fileExists("/dev/kvm"):
		if probe.Status != hostinfo.Fail || rep.Acceleration == hostinfo.AccelKVM {
			t.Errorf("no /dev/kvm: probe %s, acceleration %s; want FAIL and not kvm", probe.Status, rep.Acceleration)
		}
	case pvm:
		if probe.Status == hostinfo.Pass {
			t.Errorf("kvm_pvm host: kvm.probe PASS; want not PASS (guests run far too slowly here)")
		}
		if !strings.Contains(probe.Hint, "TCG") {
			t.Errorf("kvm.probe hint %q does not mention TCG", probe.Hint)
		}
		if rep.Acceleration != hostinfo.AccelTCG {
			t.Errorf("acceleration %q; want tcg", rep.Acceleration)
		}
		if r.code != 3 {
			t.Errorf("exit %d; want 3 (a check FAILed)", r.code)
		}
		mod, _ := rep.Check("kvm.module")
		if mod.Status != hostinfo.Warn || !strings.Contains(mod.Detail, "kvm_pvm") {
			t.Errorf("kvm.module = %s %q; want WARN naming kvm_pvm", mod.Status, mod.Detail)
		}
	case hwKVM:
		if probe.Status != hostinfo.Pass || rep.Acceleration != hostinfo.AccelKVM {
			t.Errorf("bare-metal KVM host: probe %s %q, acceleration %s; want PASS and kvm", probe.Status, probe.Detail, rep.Acceleration)
		}
	default:
		t.Logf("neither a PVM nor a bare-metal KVM host: only the consistency checks apply")
	}
	if rep.Acceleration == hostinfo.AccelKVM && probe.Status != hostinfo.Pass {
		t.Errorf("acceleration kvm without a passing probe")
	}

	// The verdict is cached for this boot under --root.
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	c, err := hostinfo.LoadAccelCache(filepath.Join(root, "run/virtcon/acceleration.json"), strings.TrimSpace(string(boot)))
	if err != nil {
		t.Fatalf("acceleration cache: %v", err)
	}
	if c.Acceleration != rep.Acceleration {
		t.Errorf("cached acceleration %q; report says %q", c.Acceleration, rep.Acceleration)
	}
	if c.Probe == nil || c.Probe.Stage == "" {
		t.Errorf("the cache holds no probe result for screens to reuse: %+v", c)
	}
}

// A probe that does not finish is killed at its deadline and reported as
// FAIL with the time; the command never hangs.
func TestIntegrationProbeDeadline(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	if !fileExists("/dev/kvm") {
		t.Skip("no /dev/kvm on this machine")
	}
	r := virt(t, nil, "host", "check", "-o", "json", "--root", t.TempDir(), "--probe-timeout", "200ms")
	rep := parseReport(t, r)
	probe, _ := rep.Check("kvm.probe")
	t.Logf("kvm.probe with a 200ms deadline: %s %s (command took %v)", probe.Status, probe.Detail, r.elapsed)
	if r.elapsed > 5e9 {
		t.Errorf("virt host check took %v with a 200ms probe deadline", r.elapsed)
	}
	if probe.Status == hostinfo.Fail && !regexp.MustCompile(`[0-9.]+m?s\b`).MatchString(probe.Detail) {
		t.Errorf("failed probe detail %q does not give the time", probe.Detail)
	}
}

// Without root, checks that need privileges say UNKNOWN "needs root"
// instead of failing the whole command.
func TestIntegrationNonRoot(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	root := t.TempDir()
	os.Chmod(root, 0o777)
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	r := virt(t, nobody, "host", "check", "-o", "json", "--root", root)
	if r.code != 0 && r.code != 3 {
		t.Fatalf("as nobody: exit %d; want 0 or 3\nstderr: %s", r.code, r.stderr)
	}
	rep := parseReport(t, r)
	st, err := os.Stat("/dev/kvm")
	if err != nil {
		t.Skip("no /dev/kvm: nothing root-only to check")
	}
	if st.Mode().Perm()&0o006 == 0o006 {
		t.Skip("/dev/kvm is world read-write here, so nobody needs no root for it")
	}
	for _, id := range []string{"kvm.device", "kvm.probe"} {
		c, _ := rep.Check(id)
		if c.Status != hostinfo.Unknown || !strings.Contains(c.Detail, "needs root") {
			t.Errorf("as nobody, %s = %s %q; want UNKNOWN with \"needs root\"", id, c.Status, c.Detail)
		}
	}
	if rep.Acceleration == hostinfo.AccelKVM {
		t.Error("acceleration kvm without a probe")
	}

	info := virt(t, nobody, "host", "info", "-o", "json")
	if info.code != 0 {
		t.Errorf("host info as nobody: exit %d: %s", info.code, info.stderr)
	}
}

func TestIntegrationHostInfoLive(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	r := virt(t, nil, "host", "info", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var inv hostinfo.Inventory
	if err := json.Unmarshal([]byte(r.stdout), &inv); err != nil {
		t.Fatal(err)
	}
	host, _ := os.ReadFile("/proc/sys/kernel/hostname")
	if inv.Hostname != strings.TrimSpace(string(host)) {
		t.Errorf("hostname %q; want %q", inv.Hostname, strings.TrimSpace(string(host)))
	}
	wantBackend := "none"
	for _, m := range []string{"kvm_intel", "kvm_amd", "kvm_pvm"} {
		if fileExists("/sys/module/" + m) {
			wantBackend = m
			break
		}
	}
	if inv.KVM.Backend != wantBackend {
		t.Errorf("kvm backend %q; want %q", inv.KVM.Backend, wantBackend)
	}
	sizes, _ := filepath.Glob("/sys/kernel/mm/hugepages/hugepages-*")
	if len(inv.Hugepages.Pools) != len(sizes) {
		t.Errorf("%d hugepage pools; the kernel has %d sizes", len(inv.Hugepages.Pools), len(sizes))
	}
	nodes, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	if len(inv.NUMA.Nodes) != len(nodes) {
		t.Errorf("%d NUMA nodes; sysfs has %d", len(inv.NUMA.Nodes), len(nodes))
	}
	for _, n := range inv.NUMA.Nodes {
		if len(n.Hugepages) != len(sizes) {
			t.Errorf("node %d: %d hugepage pools; want %d", n.ID, len(n.Hugepages), len(sizes))
		}
	}
	pci, _ := filepath.Glob("/sys/bus/pci/devices/*")
	if len(inv.PCI) != len(pci) {
		t.Errorf("%d PCI devices; sysfs has %d", len(inv.PCI), len(pci))
	}
	if inv.Memory.TotalBytes == nil || *inv.Memory.TotalBytes == 0 {
		t.Error("memory total unknown on the live machine")
	}
}

func TestIntegrationDiagnostics(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	file := filepath.Join(t.TempDir(), "d.tar.gz")
	r := virt(t, nil, "diagnostics", "-o", file, "--root", t.TempDir())
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() < 200 {
		t.Errorf("bundle %s: %v, mode %v, %d bytes; want a 0600 file", file, err, st.Mode().Perm(), st.Size())
	}
}
