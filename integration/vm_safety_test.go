//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/vm"
)

// The defects of issue 9 that need a real QEMU: an unreadable spec of a
// running VM, an unprivileged caller, a paused guest's stop, --timeout 0,
// a busy console, a create whose start fails.

// A running VM whose vm.yaml is cut short is not "not found": show, stop
// and create fail naming the file, its QEMU is left alone and listed as
// UNREADABLE with its pid, never as ORPHANED; once the spec is back, the
// VM is whole again.
func TestIntegrationVMUnreadableSpecOfRunningVM(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "k1", g.initrd, true)
	pid := entry(t, root, "k1").PID
	spec := filepath.Join(root, "var/lib/virtcon/vms", uid, "vm.yaml")
	whole, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, whole[:len(whole)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"vm", "show", "k1"}, {"vm", "stop", "k1", "--timeout", "1"},
		{"vm", "create", "k1", "--kernel", g.kernel, "--initrd", g.initrd}} {
		r := virt(t, nil, append([]string{"--root", root}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, spec) || strings.Contains(r.stderr, "not found") {
			t.Errorf("virt %s: exit %d, stderr %q; want exit 1 naming %s", strings.Join(args, " "), r.code, r.stderr, spec)
		}
	}
	if !alive(pid) {
		t.Fatal("the VM's QEMU died while its spec was unreadable")
	}
	r := virt(t, nil, "--root", root, "vm", "list", "-o", "json")
	var rows []vm.Entry
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("vm list: %v: %s", err, r.stdout)
	}
	var mine []vm.Entry // other packages' tests run guests and TAPs of their own meanwhile
	for _, e := range rows {
		if e.UID == uid || strings.HasPrefix(e.Path, root) || (e.Class == vm.ClassOrphaned && e.PID == pid) {
			mine = append(mine, e)
		}
	}
	if r.code != 1 || len(mine) != 1 || mine[0].Class != vm.ClassUnreadable || mine[0].PID != pid || mine[0].Phase != vm.PhaseRunning || mine[0].Name != "k1" {
		t.Errorf("vm list: exit %d, rows %+v; want exit 1 and one UNREADABLE Running row k1 with pid %d", r.code, mine, pid)
	}
	if err := os.WriteFile(spec, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	// forced: the guest may still be booting (no ACPI button driver yet)
	// on a loaded machine, and a plain stop then leaves it running
	v(t, root, "vm", "stop", "k1", "--timeout", "30", "--force")
	if alive(pid) {
		t.Error("stop after the spec was repaired left the QEMU running")
	}
}

// An unprivileged caller cannot read the store: "needs root" (exit 4),
// never "not found", and never a MANAGED VM shown as ORPHANED.
func TestIntegrationVMUnprivileged(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	createGuest(t, root, "t1", g.initrd, true)
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	for _, args := range [][]string{{"vm", "start", "t1"}, {"vm", "show", "t1"}, {"vm", "list"}, {"vm", "list", "-o", "json"}} {
		r := virt(t, nobody, append([]string{"--root", root}, args...)...)
		if r.code != 4 || !strings.Contains(r.stderr, "needs root") || strings.Contains(r.stderr, "not found") {
			t.Errorf("as nobody, virt %s: exit %d, stderr %q; want exit 4, needs root", strings.Join(args, " "), r.code, r.stderr)
		}
		if strings.Contains(r.stdout, vm.ClassOrphaned) {
			t.Errorf("as nobody, virt %s listed an ORPHANED row:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
}

// A paused guest cannot see the ACPI power button: stop resumes it first,
// so it powers off cleanly well within the timeout.
func TestIntegrationVMStopPaused(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "p1", g.initrd, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	v(t, root, "vm", "pause", "p1")
	if e := entry(t, root, "p1"); e.Phase != vm.PhasePaused {
		t.Fatalf("after pause: %s; want Paused", e.Phase)
	}
	start := time.Now()
	v(t, root, "vm", "stop", "p1", "--timeout", "60")
	took := time.Since(start)
	t.Logf("stop of a paused guest: %v", took)
	if took > 40*time.Second {
		t.Errorf("stop of a paused guest took %v: it waited out the timeout", took)
	}
	if !strings.Contains(serialLog(root, uid), "VIRTCON-POWEROFF") {
		t.Error("the paused guest did not power off through the ACPI button")
	}
}

// --timeout 0 means no graceful wait: a guest that ignores the power
// button is quit at once, not after the 60 s default.
func TestIntegrationVMStopTimeoutZero(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "z1", g.deaf, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	pid := entry(t, root, "z1").PID
	start := time.Now()
	v(t, root, "vm", "stop", "z1", "--timeout", "0")
	took := time.Since(start)
	t.Logf("stop --timeout 0: %v", took)
	if took > 15*time.Second {
		t.Errorf("stop --timeout 0 took %v; want an immediate quit", took)
	}
	if alive(pid) {
		t.Error("stop --timeout 0 left the QEMU alive")
	}
}

// One console client at a time: a second `vm console` says "console busy"
// and who holds it, and exits non-zero at once; so does one while another
// program holds the serial socket. A stopped VM's console prints only the
// error.
func TestIntegrationVMConsoleBusy(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	uid := createGuest(t, root, "c1", g.initrd, true)
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 90*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := exec.CommandContext(ctx, virtBin, "--root", root, "vm", "console", "c1")
	in, _ := first.StdinPipe()
	var firstErr testutil.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(firstErr.String(), "Connected") {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(firstErr.String(), "Connected") {
		t.Fatalf("first console never connected: %q", firstErr.String())
	}
	start := time.Now()
	r := virt(t, nil, "--root", root, "vm", "console", "c1")
	if r.code == 0 || !strings.Contains(r.stderr, "console busy") || !strings.Contains(r.stderr, strconv.Itoa(first.Process.Pid)) ||
		strings.Contains(r.stderr, "Connected") || time.Since(start) > 10*time.Second {
		t.Errorf("second console: exit %d after %v, stderr %q; want non-zero at once, console busy, naming pid %d",
			r.code, time.Since(start), r.stderr, first.Process.Pid)
	}
	in.Write([]byte{vm.DetachKey})
	if err := first.Wait(); err != nil {
		t.Errorf("first console: %v after Ctrl-]", err)
	}

	// a client that is not virtcon (socat, nc -U) holds the socket
	conn, err := net.Dial("unix", filepath.Join(root, "run/virtcon/vms", uid, "serial.sock"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	r = virt(t, nil, "--root", root, "vm", "console", "c1")
	if r.code == 0 || !strings.Contains(r.stderr, "console busy") || strings.Contains(r.stderr, "Connected") {
		t.Errorf("console while another program holds the socket: exit %d, stderr %q; want console busy", r.code, r.stderr)
	}
	conn.Close()
	time.Sleep(200 * time.Millisecond)
	if out := consoleRoundTrip(t, root, "c1", "echo virtcon-$((6*7))"); !strings.Contains(out, "virtcon-42") {
		t.Errorf("console after the other client left: %q", out)
	}

	v(t, root, "vm", "stop", "c1", "--timeout", "30")
	r = virt(t, nil, "--root", root, "vm", "console", "c1")
	if r.code == 0 || !strings.Contains(r.stderr, "not running") || strings.Contains(r.stderr, "Connected") || strings.Contains(r.stderr, "Detached") {
		t.Errorf("console of a stopped VM: exit %d, stderr %q; want only the error", r.code, r.stderr)
	}
}

// A create --start whose start fails says the VM was created and why it
// did not start; the VM is there, stopped.
func TestIntegrationVMCreateStartFails(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	r := virt(t, nil, "--root", root, "vm", "create", "f1", "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "256",
		"--network", "bridge=vcnosuchbr0", "--start")
	if r.code != 1 || !strings.Contains(r.stderr, "was created") || !strings.Contains(r.stderr, "did not start") || !strings.Contains(r.stderr, "vcnosuchbr0") {
		t.Errorf("create --start on a missing bridge: exit %d, stderr %q; want exit 1, created but did not start, naming the bridge", r.code, r.stderr)
	}
	if e := entry(t, root, "f1"); e.Class != vm.ClassManaged || e.Phase != vm.PhaseStopped {
		t.Errorf("after the failed start: %+v; want MANAGED Stopped", e)
	}
}

// `make virt` stamps the commit, so `virt version -o json` carries it even
// where Go's own VCS stamp is off (GOFLAGS=-buildvcs=false).
func TestIntegrationVersionCommit(t *testing.T) {
	testutil.RequireCommand(t, "make", "apt-get install make")
	repo, _ := filepath.Abs("..")
	head, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): no commit to stamp", err)
	}
	bin := filepath.Join(t.TempDir(), "virt")
	mk := exec.Command("make", "-s", "-C", repo, "virt", "VIRT_BIN="+bin, "GO="+goTool())
	mk.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make virt: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Commit string }
	if err := json.Unmarshal(out, &info); err != nil || info.Commit != strings.TrimSpace(string(head)) {
		t.Errorf("version -o json: %s; want commit %s", out, head)
	}
}
