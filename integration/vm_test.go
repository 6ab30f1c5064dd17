//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/vm"
)

// waitSeed waits for the guest's verdict on its NoCloud seed: its
// instance-id (which must be uid) or VIRTCON-NO-SEED, which fails at once.
// The test guest is Debian's cloud kernel, which has no AHCI: a seed on a
// SATA cdrom (ide-cd on q35) is invisible to it, as to real cloud images.
func waitSeed(t *testing.T, root, uid string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		log := serialLog(root, uid)
		if strings.Contains(log, "VIRTCON-INSTANCE-ID="+uid) {
			took := time.Since(start)
			kernel := ""
			if _, after, ok := strings.Cut(log, "VIRTCON-KERNEL="); ok {
				kernel, _, _ = strings.Cut(after, "\n")
				kernel = strings.TrimSpace(kernel)
			}
			if !strings.HasSuffix(kernel, "-cloud-amd64") {
				t.Errorf("guest kernel %q; want Debian's cloud kernel (*-cloud-amd64, no AHCI), or this test cannot catch a seed the cloud images do not see: rebuild build/guest with `make guest` (GUEST_KERNEL_FLAVOUR unset)", kernel)
			}
			return took
		}
		if strings.Contains(log, "VIRTCON-NO-SEED") {
			t.Fatalf("the guest found no NoCloud seed (VIRTCON-NO-SEED); want VIRTCON-INSTANCE-ID=%s. Is the seed on a bus the cloud kernel lacks (ide-cd on AHCI)? log:\n%s", uid, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no VIRTCON-INSTANCE-ID=%s in the serial log after %v; log:\n%s", uid, timeout, serialLog(root, uid))
	return 0
}

// A real guest boots under virt, reads its NoCloud seed (a scsi-cd on
// virtio-scsi, seen by the cloud kernel as /dev/sr0), and powers off on
// the ACPI power button; the VM is found by UUID in /proc.
func TestIntegrationVMBootSeedAndGracefulStop(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "boot1", g.initrd, true)
	e := entry(t, root, "boot1")
	if e.Class != vm.ClassManaged || e.Phase != vm.PhaseRunning || e.PID == 0 {
		t.Fatalf("after start: %+v; want MANAGED Running with a pid", e)
	}
	if e.Accel != "tcg" && e.Accel != "kvm" {
		t.Errorf("accel %q", e.Accel)
	}
	if fileExists("/sys/module/kvm_pvm") && e.Accel != "tcg" {
		t.Errorf("accel %q on a PVM host; want tcg (the probe says KVM crawls here)", e.Accel)
	}
	took := waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	t.Logf("boot to ready marker: %v", took)
	t.Logf("ready to the seed's instance-id: %v", waitSeed(t, root, uid, 30*time.Second))

	start := time.Now()
	v(t, root, "vm", "stop", "boot1", "--timeout", "60s")
	t.Logf("graceful stop took %v", time.Since(start))
	if !strings.Contains(serialLog(root, uid), "VIRTCON-POWEROFF") {
		t.Error("the guest did not power off through ACPI (no VIRTCON-POWEROFF in its log)")
	}
	if alive(e.PID) {
		t.Errorf("qemu pid %d still alive after stop", e.PID)
	}
	e = entry(t, root, "boot1")
	if e.Phase != vm.PhaseStopped || e.Class != vm.ClassManaged {
		t.Errorf("after stop: %+v; want MANAGED Stopped", e)
	}
	for _, s := range []string{"qmp.sock", "serial.sock", "qemu.pid"} {
		if fileExists(filepath.Join(root, "run/virtcon/vms", uid, s)) {
			t.Errorf("%s left after stop", s)
		}
	}
	if serialLog(root, uid) == "" {
		t.Error("stop removed the serial log; logs are kept")
	}
}

// The deaf guest ignores the power button: a stop without --force leaves
// it running after --timeout and says so (exit 1); with --force it falls
// back to QMP quit. A SIGSTOPped QEMU answers nothing: a stop without
// --force leaves it so, with --force it falls back to SIGKILL.
func TestIntegrationVMStopFallbacks(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "deaf1", g.deaf, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	pid := entry(t, root, "deaf1").PID
	start := time.Now()
	left := virt(t, nil, "--root", root, "vm", "stop", "deaf1", "--timeout", "2s")
	if took := time.Since(start); left.code != 1 || took < 2*time.Second || !strings.Contains(left.stderr, "QEMU was left running") || !strings.Contains(left.stderr, "--force") {
		t.Errorf("stop without --force of a deaf guest: exit %d after %v, stderr %q; want exit 1 after 2s saying QEMU runs on and --force", left.code, took, left.stderr)
	}
	if e := entry(t, root, "deaf1"); !alive(pid) || e.PID != pid || e.Phase != vm.PhaseRunning {
		t.Fatalf("after a stop without --force: %s pid %d (alive %v); want Running pid %d", e.Phase, e.PID, alive(pid), pid)
	}
	start = time.Now()
	v(t, root, "vm", "stop", "deaf1", "--timeout", "3s", "--force")
	took := time.Since(start)
	t.Logf("deaf stop: %v", took)
	if took < 3*time.Second {
		t.Errorf("stop returned after %v, before its 3s timeout: the deaf guest cannot have powered off", took)
	}
	if alive(pid) {
		t.Fatalf("deaf guest pid %d alive after stop", pid)
	}
	if strings.Contains(serialLog(root, uid), "VIRTCON-POWEROFF") {
		t.Error("the deaf guest powered off; it should ignore the power button")
	}

	v(t, root, "vm", "start", "deaf1")
	pid = entry(t, root, "deaf1").PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// the signal takes effect when the process is next scheduled: on a
	// loaded machine a listing right after kill(2) can still find it
	// answering QMP
	waitFor(t, 5*time.Second, func() bool { return procState(pid) == "T" })
	if e := entry(t, root, "deaf1"); e.Phase != vm.PhaseUnresponsive {
		t.Errorf("SIGSTOPped QEMU listed as %s; want Unresponsive", e.Phase)
	}
	if r := virt(t, nil, "--root", root, "vm", "stop", "deaf1", "--timeout", "1s"); r.code != 1 || !alive(pid) || !strings.Contains(r.stderr, "stopped by a signal") {
		t.Errorf("stop without --force of a SIGSTOPped QEMU: exit %d, alive %v, stderr %q; want exit 1, QEMU left so, the signal named", r.code, alive(pid), r.stderr)
	}
	start = time.Now()
	r := virt(t, nil, "--root", root, "--log-level", "debug", "vm", "stop", "deaf1", "--timeout", "1s", "--force")
	t.Logf("stop of a SIGSTOPped QEMU: %v, exit %d: %s", time.Since(start), r.code, r.stderr)
	if alive(pid) {
		t.Errorf("SIGSTOPped QEMU pid %d survived stop", pid)
	}
	if e := entry(t, root, "deaf1"); e.Phase != vm.PhaseStopped {
		t.Errorf("after stop: %s; want Stopped", e.Phase)
	}
}

// Killing virt with SIGKILL in the middle of start or stop leaves a state
// that a new virt reads truthfully and finishes.
func TestIntegrationVMKillVirtMidOperation(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "k1", g.deaf, false)
	for _, delay := range []time.Duration{5 * time.Millisecond, 60 * time.Millisecond, 250 * time.Millisecond} {
		cmd := exec.Command(virtBin, "--root", root, "vm", "start", "k1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		cmd.Process.Kill()
		cmd.Wait()
		// QEMU's -daemonize parent outlives a killed virt for a moment,
		// with the child's command line: one VM, about to be one process.
		// A single process seen is not yet settled either: a parent that
		// has not forked yet is one process until it does (once, in CI,
		// the listing that followed found the fresh child). The listing
		// is judged against a process set that held across it.
		var (
			pids []int
			e    vm.Entry
		)
		for settle := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			pids = qemuPIDsUnder(filepath.Join(root, "run/virtcon/vms", uid))
			if len(pids) > 1 && time.Now().Before(settle) {
				continue
			}
			e = entry(t, root, "k1")
			after := qemuPIDsUnder(filepath.Join(root, "run/virtcon/vms", uid))
			if slices.Equal(pids, after) || time.Now().After(settle) {
				break
			}
		}
		t.Logf("virt start killed after %v: %s %s pid %d", delay, e.Class, e.Phase, e.PID)
		if len(pids) > 1 {
			t.Fatalf("%d QEMU processes for one VM: %v", len(pids), pids)
		}
		if len(pids) == 1 && e.PID != pids[0] {
			t.Errorf("a QEMU (pid %d) runs but list says %s pid %d", pids[0], e.Phase, e.PID)
		}
		if len(pids) == 0 && e.Phase != vm.PhaseStopped {
			t.Errorf("no QEMU runs but list says %s", e.Phase)
		}
		// a new virt finishes the job, whatever state was left
		v(t, root, "vm", "start", "k1")
		if e := entry(t, root, "k1"); e.Phase != vm.PhaseRunning {
			t.Fatalf("after a new start: %s; want Running", e.Phase)
		}
		if n := len(qemuPIDsUnder(filepath.Join(root, "run/virtcon/vms", uid))); n != 1 {
			t.Fatalf("%d QEMU processes after restart; want 1", n)
		}
		v(t, root, "vm", "stop", "k1", "--timeout", "1s", "--force")
	}

	// kill virt during a stop that waits for a deaf guest
	v(t, root, "vm", "start", "k1")
	pid := entry(t, root, "k1").PID
	cmd := exec.Command(virtBin, "--root", root, "vm", "stop", "k1", "--timeout", "30s", "--force")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Kill()
	cmd.Wait()
	if !alive(pid) {
		t.Fatal("the deaf guest died although the stop was killed before its timeout")
	}
	if e := entry(t, root, "k1"); e.Phase != vm.PhaseRunning || e.PID != pid {
		t.Errorf("after killed stop: %s pid %d; want Running pid %d", e.Phase, e.PID, pid)
	}
	v(t, root, "vm", "stop", "k1", "--timeout", "1s", "--force")
	if alive(pid) {
		t.Error("a new stop did not finish the job")
	}
}

// The VM survives the death of every virtcon process, and is found again
// by UUID even when its pidfile is gone.
func TestIntegrationVMSurvivesVirtcon(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "s1", g.initrd, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	pid := entry(t, root, "s1").PID

	// long-running virtcon processes attached to the VM, killed with SIGKILL
	console := exec.Command(virtBin, "--root", root, "vm", "console", "s1")
	stdin, err := console.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	logs := exec.Command(virtBin, "--root", root, "vm", "logs", "-f", "s1")
	for _, c := range []*exec.Cmd{console, logs} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	for _, c := range []*exec.Cmd{console, logs} {
		c.WaitDelay = time.Second
		c.Process.Kill()
		c.Wait()
	}
	time.Sleep(300 * time.Millisecond)
	if !alive(pid) {
		t.Fatal("the VM died with the virtcon processes attached to it")
	}
	os.Remove(filepath.Join(root, "run/virtcon/vms", uid, "qemu.pid"))
	e := entry(t, root, "s1")
	if e.PID != pid || e.Phase != vm.PhaseRunning {
		t.Errorf("without its pidfile the VM is listed %s pid %d; want Running pid %d (found by UUID)", e.Phase, e.PID, pid)
	}
	// the serial console still works after the killed attachment
	out := consoleRoundTrip(t, root, "s1", "echo virtcon-$((6*7))")
	if !strings.Contains(out, "virtcon-42") {
		t.Errorf("console output lacks the command's result: %q", out)
	}
	if !alive(pid) {
		t.Error("detaching the console stopped the VM")
	}
	v(t, root, "vm", "kill", "s1")
	if alive(pid) {
		t.Error("kill left the QEMU alive")
	}
}

// consoleRoundTrip attaches, types a command, waits for its output
// (virtcon-42), detaches, and returns what came back.
func consoleRoundTrip(t *testing.T, root, name, command string) string {
	t.Helper()
	out, err := consoleSession(root, name, command, "virtcon-42", 20*time.Second)
	if err != nil {
		t.Errorf("console exited with %v after Ctrl-]", err)
	}
	return out
}

// consoleSession attaches to the VM's console with virt vm console, types
// command, waits up to timeout for want in what comes back, detaches with
// Ctrl-], and returns the output and how virt vm console exited.
func consoleSession(root, name, command, want string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, virtBin, "--root", root, "vm", "console", name)
	in, _ := cmd.StdinPipe()
	var out testutil.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	time.Sleep(300 * time.Millisecond)
	fmt.Fprintf(in, "\n%s\n", command)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline) && !strings.Contains(out.String(), want); {
		time.Sleep(100 * time.Millisecond)
	}
	in.Write([]byte{vm.DetachKey})
	err := cmd.Wait()
	return out.String(), err
}

// Ten concurrent CLI operations on one VM neither deadlock nor corrupt it.
func TestIntegrationVMConcurrentOperations(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "c1", g.initrd, true)
	ops := [][]string{
		{"vm", "pause", "c1"}, {"vm", "resume", "c1"}, {"vm", "list", "-o", "json"}, {"vm", "show", "c1", "-o", "json"},
		{"vm", "start", "c1"}, {"vm", "pause", "c1"}, {"vm", "resume", "c1"}, {"vm", "show", "c1"},
		{"vm", "list"}, {"vm", "start", "c1"},
	}
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		results := make([]result, len(ops))
		start := time.Now()
		for i, op := range ops {
			wg.Add(1)
			go func(i int, op []string) {
				defer wg.Done()
				results[i] = virt(t, nil, append([]string{"--root", root}, op...)...)
			}(i, op)
		}
		wg.Wait()
		t.Logf("round %d: 10 concurrent operations took %v", round, time.Since(start))
		checkResults(t, ops, results)
	}
	v(t, root, "vm", "resume", "c1")
	if n := len(qemuPIDsUnder(filepath.Join(root, "run/virtcon/vms", uid))); n != 1 {
		t.Errorf("%d QEMU processes for c1; want 1", n)
	}
	var m vm.VirtualMachine
	if err := json.Unmarshal([]byte(v(t, root, "vm", "show", "c1", "-o", "json")), &m); err != nil {
		t.Fatalf("spec unreadable after concurrent operations: %v", err)
	}
	if m.Metadata.UID != uid || !m.Spec.Running {
		t.Errorf("spec after concurrent operations: uid %s running %t", m.Metadata.UID, m.Spec.Running)
	}
	if e := entry(t, root, "c1"); e.Phase != vm.PhaseRunning {
		t.Errorf("phase %s; want Running", e.Phase)
	}
}

// checkResults: pause/resume may race each other's order, but every
// operation must succeed and none may crash.
func checkResults(t *testing.T, ops [][]string, results []result) {
	t.Helper()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("virt %v: exit %d: %s", ops[i], r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "panic") {
			t.Errorf("virt %v panicked: %s", ops[i], r.stderr)
		}
	}
}

// A pidfile naming an unrelated process is never taken for the VM.
func TestIntegrationVMStalePIDFile(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "p1", g.initrd, false)
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	dir := filepath.Join(root, "run/virtcon/vms", uid)
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "qemu.pid"), []byte(strconv.Itoa(sleeper.Process.Pid)+"\n"), 0o600)
	if e := entry(t, root, "p1"); e.Phase != vm.PhaseStopped || e.PID != 0 {
		t.Errorf("with a pidfile naming sleep(1): %s pid %d; want Stopped pid 0", e.Phase, e.PID)
	}
	v(t, root, "vm", "stop", "p1")
	v(t, root, "vm", "kill", "p1")
	if !alive(sleeper.Process.Pid) {
		t.Fatal("stop/kill killed the unrelated process named by the pidfile")
	}
	v(t, root, "vm", "start", "p1")
	if e := entry(t, root, "p1"); e.Phase != vm.PhaseRunning || e.PID == sleeper.Process.Pid {
		t.Errorf("start over a stale pidfile: %s pid %d", e.Phase, e.PID)
	}
	v(t, root, "vm", "kill", "p1")
}

// A QEMU that is not ours is listed EXTERNAL and never touched.
func TestIntegrationVMExternalUntouched(t *testing.T) {
	requireGuest(t)
	root := vmRoot(t)
	other := t.TempDir()
	t.Cleanup(func() { killUnder(other) })
	pidfile := filepath.Join(other, "ext.pid")
	cmd := exec.Command("qemu-system-x86_64", "-name", "guest=ext1", "-uuid", "6f1c1a8e-0000-4000-8000-00000000e001",
		"-accel", "tcg", "-nodefaults", "-display", "none", "-S", "-daemonize", "-pidfile", pidfile,
		"-qmp", "unix:"+filepath.Join(other, "q.sock")+",server=on,wait=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("starting an external QEMU: %v: %s", err, out)
	}
	b, _ := os.ReadFile(pidfile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	var entries []vm.Entry
	json.Unmarshal([]byte(v(t, root, "vm", "list", "-o", "json")), &entries)
	found := false
	for _, e := range entries {
		if e.PID == pid {
			found = true
			if e.Class != vm.ClassExternal || e.Name != "ext1" {
				t.Errorf("external QEMU listed as %+v; want EXTERNAL ext1", e)
			}
		}
	}
	if !found {
		t.Errorf("external QEMU pid %d not listed", pid)
	}
	for _, op := range [][]string{{"vm", "stop", "ext1"}, {"vm", "kill", "ext1"}, {"vm", "delete", "ext1", "--force"}} {
		if r := virt(t, nil, append([]string{"--root", root}, op...)...); r.code == 0 {
			t.Errorf("virt %v succeeded on an external guest", op)
		}
	}
	v(t, root, "vm", "gc")
	if !alive(pid) {
		t.Fatal("an external QEMU was killed")
	}
	// libvirt, when installed, is a peer whose domains are listed read-only
	if fileExists("/etc/libvirt/qemu") {
		t.Log("libvirt is installed: its defined domains are listed from /etc/libvirt/qemu")
	}
}

// UEFI guests boot through OVMF with their own NVRAM copy.
func TestIntegrationVMUEFIBoot(t *testing.T) {
	g := requireGuest(t)
	if !fileExists("/usr/share/OVMF/OVMF_CODE_4M.fd") && !fileExists("/usr/share/OVMF/OVMF_CODE.fd") {
		t.Skip("OVMF not installed (apt-get install ovmf)")
	}
	root := vmRoot(t)
	var e vm.Entry
	out := v(t, root, "vm", "create", "u1", "--kernel", g.efiKernel, "--initrd", g.initrd, "--memory", "256", "--firmware", "uefi", "--start", "-o", "json")
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	took := waitSeed(t, root, e.UID, 180*time.Second)
	t.Logf("UEFI boot to the seed's instance-id: %v", took)
	if !fileExists(filepath.Join(root, "var/lib/virtcon/vms", e.UID, "OVMF_VARS.fd")) {
		t.Error("no per-VM OVMF_VARS.fd")
	}
	argv, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(e.PID), "cmdline"))
	if !strings.Contains(string(argv), "if=pflash") {
		t.Errorf("UEFI VM started without pflash firmware: %q", argv)
	}
	v(t, root, "vm", "kill", "u1")
}

// A libvirt domain is a peer's guest: listed EXTERNAL (source libvirt),
// never started, stopped or deleted by virt.
func TestIntegrationVMLibvirtExternal(t *testing.T) {
	g := requireGuest(t)
	if out, err := exec.Command("virsh", "-c", "qemu:///system", "version").CombinedOutput(); err != nil {
		t.Skipf("libvirt not available (scripts/libvirt-peer.sh sets it up): %v: %s", err, bytes.TrimSpace(out))
	}
	root := vmRoot(t)
	dir := t.TempDir()
	name := "vcext-" + strconv.Itoa(os.Getpid())
	xml := fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='q35'>hvm</type><kernel>%s</kernel><initrd>%s</initrd><cmdline>console=ttyS0 quiet</cmdline></os>
<devices><memballoon model='none'/></devices></domain>`, name, g.kernel, g.initrd)
	xmlPath := filepath.Join(dir, "d.xml")
	os.WriteFile(xmlPath, []byte(xml), 0o644)
	virsh := func(args ...string) (string, error) {
		out, err := exec.Command("virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := virsh("define", xmlPath); err != nil {
		t.Fatalf("virsh define: %v: %s", err, out)
	}
	t.Cleanup(func() { virsh("destroy", name); virsh("undefine", name) })
	find := func() (vm.Entry, bool) {
		var entries []vm.Entry
		json.Unmarshal([]byte(v(t, root, "vm", "list", "-o", "json")), &entries)
		for _, e := range entries {
			if e.Name == name {
				return e, true
			}
		}
		return vm.Entry{}, false
	}
	e, ok := find()
	if !ok || e.Class != vm.ClassExternal || e.Source != "libvirt" || e.Phase != vm.PhaseStopped {
		t.Errorf("defined libvirt domain listed as %+v (found %t); want EXTERNAL libvirt Stopped", e, ok)
	}
	if out, err := virsh("start", name); err != nil {
		t.Fatalf("virsh start: %v: %s", err, out)
	}
	e, ok = find()
	if !ok || e.Class != vm.ClassExternal || e.Phase != vm.PhaseRunning || e.PID == 0 {
		t.Errorf("running libvirt domain listed as %+v; want EXTERNAL Running with a pid", e)
	}
	for _, op := range [][]string{{"vm", "stop", name}, {"vm", "kill", name}, {"vm", "delete", name, "--force"}, {"vm", "start", name}} {
		if r := virt(t, nil, append([]string{"--root", root}, op...)...); r.code == 0 {
			t.Errorf("virt %v succeeded on a libvirt domain", op)
		}
	}
	v(t, root, "vm", "gc")
	if out, _ := virsh("domstate", name); !strings.Contains(out, "running") {
		t.Errorf("the libvirt domain is no longer running after virt touched nothing: %s", out)
	}
}

// procState is the state letter of /proc/PID/stat ("R", "S", "T", ...).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
