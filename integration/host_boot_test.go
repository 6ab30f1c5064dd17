//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/vm"
)

// A reboot simulated in a network namespace: three test guests (two
// autostart, in an order against their names' and with delays, one not),
// a NAT network and a bridge, and a try pending when the host "went
// down". The reboot kills every process of the namespace (QEMU, dnsmasq,
// the try's watchdog), deletes its links and nftables table and the
// runtime directory, and makes the try's record one of an earlier boot.
// `virt host boot` brings the bridge, dnsmasq and the nft table back,
// rolls the try back, starts the autostart VMs in order with their delays
// and leaves the other stopped; run again, it changes nothing.
func TestIntegrationHostBootAfterReboot(t *testing.T) {
	g := requireGuest(t)
	testutil.RequireCommand(t, "dnsmasq", "apt-get install dnsmasq-base")
	testutil.RequireCommand(t, "nft", "apt-get install nftables (the test looks at the table with it)")
	ns := netns(t)
	root := vmRoot(t)
	layout := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	netYAML := `apiVersion: virtcon/v1
kind: HostNetwork
bridges:
  - name: brboot
    addresses: [10.82.0.1/24]
networks:
  - name: default
    type: nat
    bridge: vcnat0
    subnet: 10.81.0.0/24
`
	write(layout("net.yaml"), netYAML)
	vns(t, ns, root, "net", "apply", "-f", layout("net.yaml"))
	write(layout("etc/virtcon/host.yaml"), "apiVersion: virtcon/v1\nkind: HostPolicy\nstartDelay: 1s\n")

	// zeta starts first (order 1), alpha after it (order 2) although its
	// name sorts first, after its own 2s and the policy's 1s; idle is no
	// autostart VM
	const gap = 3 * time.Second
	for _, v := range []struct {
		name string
		args []string
	}{
		{"zeta", []string{"--autostart", "--startup-order", "1", "--network", "default"}},
		{"alpha", []string{"--autostart", "--startup-order", "2", "--startup-delay", "2s", "--network", "bridge=brboot"}},
		{"idle", []string{"--network", "default"}},
	} {
		vns(t, ns, root, append([]string{"vm", "create", v.name, "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "128",
			"--cmdline", "console=ttyS0 quiet", "--accel", "tcg", "--start"}, v.args...)...)
	}
	// a try on trial when the host goes down
	write(layout("try.yaml"), netYAML+"  - name: brtry\n    type: nat\n    bridge: vctry0\n    subnet: 10.83.0.0/24\n")
	vns(t, ns, root, "net", "apply", "-f", layout("try.yaml"), "--try", "300s")
	if !linkExists(ns, "vctry0") {
		t.Fatal("the tried NAT network's bridge does not exist")
	}

	// the reboot
	nsPIDs := func() []int {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		var pids []int
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	for _, pid := range nsPIDs() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for i := 0; i < 100 && len(nsPIDs()) > 0; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	links, _ := exec.Command("ip", "-n", ns, "-o", "link", "show").Output()
	for _, l := range strings.Split(strings.TrimSpace(string(links)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@"); name != "lo" {
			if out, err := exec.Command("ip", "-n", ns, "link", "del", name).CombinedOutput(); err != nil {
				t.Fatalf("ip link del %s: %v: %s", name, err, out)
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "virtcon").CombinedOutput(); err != nil {
		t.Fatalf("nft delete table: %v: %s", err, out)
	}
	if err := os.RemoveAll(layout("run")); err != nil {
		t.Fatal(err)
	}
	pendingPath := layout("var/lib/virtcon/network/pending.json")
	b, err := os.ReadFile(pendingPath)
	if err != nil {
		t.Fatalf("no pending try before the reboot: %v", err)
	}
	var pending map[string]any
	if err := json.Unmarshal(b, &pending); err != nil {
		t.Fatal(err)
	}
	pending["bootId"] = "00000000-0000-0000-0000-0000e4a11e40" // an earlier boot's
	b, _ = json.Marshal(pending)
	write(pendingPath, string(b))
	if linkExists(ns, "brboot") || linkExists(ns, "vcnat0") {
		t.Fatal("the simulated reboot left the bridges")
	}

	// the boot
	r := virtIn(t, ns, "--root", root, "host", "boot", "-o", "json")
	if r.code != 0 {
		t.Fatalf("virt host boot: exit %d\nstderr: %s", r.code, r.stderr)
	}
	var rec host.BootRecord
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("host boot -o json: %v\n%s", err, r.stdout)
	}
	t.Logf("boot took %v: %s", r.elapsed.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	if rec.Network.RolledBack == nil || rec.Network.Result != host.NetApplied {
		t.Errorf("network %+v; want the try rolled back, then the applied network applied", rec.Network)
	}
	for _, l := range []string{"brboot", "vcnat0"} {
		if !linkExists(ns, l) {
			t.Errorf("%s is not back after the boot", l)
		}
	}
	if linkExists(ns, "vctry0") {
		t.Error("the try's bridge is there: the try was not rolled back")
	}
	if out, err := exec.Command("ip", "-n", ns, "-o", "addr", "show", "dev", "brboot").Output(); err != nil || !strings.Contains(string(out), "10.82.0.1/24") {
		t.Errorf("brboot addresses: %s (%v); want 10.82.0.1/24", out, err)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", "virtcon").CombinedOutput(); err != nil || !strings.Contains(string(out), "nat-default") {
		t.Errorf("nft table inet virtcon after the boot: %v: %s", err, out)
	}
	dnsmasq := 0
	for _, pid := range nsPIDs() {
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "dnsmasq" {
			dnsmasq++
		}
	}
	if dnsmasq != 1 {
		t.Errorf("%d dnsmasq processes in the namespace after the boot; want 1 (the NAT network's)", dnsmasq)
	}
	if _, err := os.Stat(pendingPath); !os.IsNotExist(err) {
		t.Errorf("the pending try's record is still there (%v)", err)
	}
	if b, _ := os.ReadFile(layout("var/lib/virtcon/network/applied.yaml")); strings.Contains(string(b), "vctry0") || !strings.Contains(string(b), "brboot") {
		t.Errorf("applied.yaml after the rollback:\n%s", b)
	}

	// the VMs: zeta, then alpha at least the delays later; idle stopped
	outcome := map[string]host.BootVM{}
	for _, v := range rec.VMs {
		outcome[v.Name] = v
	}
	zeta, alpha := outcome["zeta"], outcome["alpha"]
	if zeta.Outcome != host.BootStarted || alpha.Outcome != host.BootStarted || outcome["idle"].Outcome != host.BootMarkedStopped {
		t.Fatalf("outcomes %+v; want zeta and alpha started, idle marked stopped", rec.VMs)
	}
	if len(rec.VMs) != 3 || rec.VMs[0].Name != "zeta" || rec.VMs[1].Name != "alpha" {
		t.Errorf("boot order %v; want zeta, alpha (by order, not name)", []string{rec.VMs[0].Name, rec.VMs[1].Name})
	}
	if d := alpha.StartedAt.Sub(*zeta.StartedAt); d < gap || d > gap+30*time.Second {
		t.Errorf("alpha started %v after zeta; want its 2s and the policy's 1s after zeta's start (%v)", d, gap)
	}
	vms := listVMsIn(t, ns, root)
	pids := map[string]int{}
	for _, name := range []string{"zeta", "alpha"} {
		e := vms[name]
		if e.Class != vm.ClassManaged || !e.Running() {
			t.Errorf("%s after the boot: %s %s; want MANAGED and running", name, e.Class, e.Phase)
		}
		pids[name] = e.PID
	}
	if e := vms["idle"]; e.Class != vm.ClassManaged || e.Phase != vm.PhaseStopped || e.PID != 0 {
		t.Errorf("idle after the boot: %s %s pid %d; want MANAGED Stopped", e.Class, e.Phase, e.PID)
	}
	var zs, as vm.VirtualMachine
	json.Unmarshal([]byte(vns(t, ns, root, "vm", "show", "zeta", "-o", "json")), &zs)
	json.Unmarshal([]byte(vns(t, ns, root, "vm", "show", "alpha", "-o", "json")), &as)
	if zs.Status.StartedAt == nil || as.Status.StartedAt == nil || !as.Status.StartedAt.After(zs.Status.StartedAt.Add(gap)) {
		t.Errorf("started at: zeta %v, alpha %v; want alpha more than %v after zeta", zs.Status.StartedAt, as.Status.StartedAt, gap)
	}
	if out, _ := exec.Command("ip", "-n", ns, "-o", "link", "show", "master", "brboot").Output(); !strings.Contains(string(out), "vc") {
		t.Errorf("alpha's TAP is not on brboot: %s", out)
	}

	// again: nothing changes
	r = virtIn(t, ns, "--root", root, "host", "boot", "-o", "json")
	if r.code != 0 {
		t.Fatalf("second virt host boot: exit %d\nstderr: %s", r.code, r.stderr)
	}
	var again host.BootRecord
	if err := json.Unmarshal([]byte(r.stdout), &again); err != nil {
		t.Fatal(err)
	}
	if again.Network.Result != host.NetUnchanged || len(again.Network.Steps) != 0 || again.Network.RolledBack != nil {
		t.Errorf("second boot's network %+v; want unchanged, no step", again.Network)
	}
	for _, v := range again.VMs {
		if v.Outcome != host.BootAlreadyRunning || v.StartedAt != nil {
			t.Errorf("second boot: %s %s; want it left running", v.Name, v.Outcome)
		}
	}
	if len(again.VMs) != 2 || again.FirstOfBoot {
		t.Errorf("second boot's VMs %+v (first of boot %v); want zeta and alpha left alone", again.VMs, again.FirstOfBoot)
	}
	vms = listVMsIn(t, ns, root)
	for name, pid := range pids {
		if vms[name].PID != pid {
			t.Errorf("%s: pid %d after the second boot; want %d (left alone)", name, vms[name].PID, pid)
		}
	}
	if e := vms["idle"]; e.Phase != vm.PhaseStopped {
		t.Errorf("idle after the second boot: %s", e.Phase)
	}
	if st := vns(t, ns, root, "host", "status"); !strings.Contains(st, "2 VMs running already") && !strings.Contains(st, "all 2 VMs running already") {
		t.Errorf("host status after the second boot:\n%s", st)
	}
}

// A host.yaml that does not admit: `virt host boot` brings the network
// up all the same, starts no VM (not even an autostart one), says why on
// stderr and in the record, and exits 2.
func TestIntegrationHostBootBrokenPolicy(t *testing.T) {
	g := requireGuest(t)
	ns := netns(t)
	root := vmRoot(t)
	cfg := filepath.Join(root, "net.yaml")
	os.WriteFile(cfg, []byte("apiVersion: virtcon/v1\nkind: HostNetwork\nbridges:\n  - name: brpol\n    addresses: [10.84.0.1/24]\n"), 0o600)
	vns(t, ns, root, "net", "apply", "-f", cfg)
	vns(t, ns, root, "vm", "create", "auto", "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "128", "--accel", "tcg", "--autostart")
	if out, err := exec.Command("ip", "-n", ns, "link", "del", "brpol").CombinedOutput(); err != nil {
		t.Fatalf("ip link del: %v: %s", err, out)
	}
	os.MkdirAll(filepath.Join(root, "etc/virtcon"), 0o700)
	os.WriteFile(filepath.Join(root, "etc/virtcon/host.yaml"), []byte("apiVersion: virtcon/v1\nkind: HostPolicy\nonBoot: everything\n"), 0o600)

	r := virtIn(t, ns, "--root", root, "host", "boot")
	if r.code != 2 || !strings.Contains(r.stderr, `onBoot: must be autostart or restore (got "everything")`) || !strings.Contains(r.stderr, "no VM started") {
		t.Errorf("virt host boot with a broken host.yaml: exit %d\nstderr: %s\nwant exit 2 naming the field and value, and that no VM started", r.code, r.stderr)
	}
	if !linkExists(ns, "brpol") {
		t.Error("the network was not brought up: a broken policy must not cost the host its network")
	}
	if e := listVMsIn(t, ns, root)["auto"]; e.Running() {
		t.Errorf("the autostart VM runs (%s, pid %d): nothing may start under a policy that does not load", e.Phase, e.PID)
	}
	var rec host.BootRecord
	b, _ := os.ReadFile(filepath.Join(root, "var/lib/virtcon/boot.json"))
	if err := json.Unmarshal(b, &rec); err != nil || !strings.Contains(rec.PolicyError, "onBoot") || len(rec.VMs) != 0 || rec.Network.Result != host.NetApplied {
		t.Errorf("boot record %s (%v); want the policy error, no VM, the network applied", b, err)
	}
}

func listVMsIn(t *testing.T, ns, root string) map[string]vm.Entry {
	t.Helper()
	var entries []vm.Entry
	if err := json.Unmarshal([]byte(vns(t, ns, root, "vm", "list", "-o", "json")), &entries); err != nil {
		t.Fatal(err)
	}
	out := map[string]vm.Entry{}
	for _, e := range entries {
		if e.Class == vm.ClassManaged || e.Class == vm.ClassMissing {
			out[e.Name] = e
		}
	}
	return out
}
