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

	"github.com/virtcon/virtcon/vm"
)

// Focused kill -9 tests of virt during clones (issue 21, items 3 and 4):
// each kills virt while its work runs and checks that nothing of it goes
// on unowned and that gc and the next command find what is left.

// killSource is a VM "src" with a 1 GiB disk full of data (so that a copy
// of it lasts long enough to be hit), its UID and its directory.
func killSource(t *testing.T, root string, start bool) (uid, dir string) {
	t.Helper()
	g := requireGuest(t)
	requireTool(t, "qemu-io")
	var e vm.Entry
	out := v(t, root, "vm", "create", "src", "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "128", "--disk", "1G",
		"--cmdline", "console=ttyS0 quiet", "-o", "json")
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "var/lib/virtcon/vms", e.UID)
	if o, err := exec.Command("qemu-io", "-c", "write -P 0x5a 0 1G", filepath.Join(dir, "disk-root.qcow2")).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io write: %v: %s", err, o)
	}
	if start {
		v(t, root, "vm", "start", "src")
	}
	return e.UID, dir
}

// startVirt starts virt --root root args in the background; the test
// kills it.
func startVirt(t *testing.T, root string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(virtBin, append([]string{"--root", root}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// killWhen polls (every 5 ms, up to 60 s) until during says the work is
// under way, then kills -9 the virt cmd and waits for it.
func killWhen(t *testing.T, cmd *exec.Cmd, what string, during func() bool) {
	t.Helper()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for !during() {
		select {
		case <-exited:
			t.Fatalf("virt %v ended before %s", cmd.Args[1:], what)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 60 s", what)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
}

// childProcs lists the live processes whose parent is pid and whose
// command line contains word, by PID.
func childProcs(pid int, word string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(pid) {
			continue
		}
		if cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); strings.Contains(string(cl), word) {
			out = append(out, p)
		}
	}
	return out
}

// gcList is `virt vm gc --dry-run`'s list.
func gcList(t *testing.T, root string) []vm.Orphan {
	t.Helper()
	var out []vm.Orphan
	if err := json.Unmarshal([]byte(v(t, root, "vm", "gc", "--dry-run", "-o", "json")), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// openUnder lists the files under dir that pid holds open.
func openUnder(pid int, dir string) []string {
	fds, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	var out []string
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name())); err == nil && strings.HasPrefix(l, dir+"/") {
			out = append(out, l)
		}
	}
	return out
}

// A full clone of a stopped source killed -9 while qemu-img copies: the
// copy dies with virt (it would write the clone's files with the
// source's lock gone), the source starts, and gc removes the clone's
// directory.
func TestIntegrationVMCloneKillStoppedCopy(t *testing.T) {
	root := vmRoot(t)
	_, _ = killSource(t, root, false)
	cmd := startVirt(t, root, "vm", "clone", "src", "c")
	var img []int
	killWhen(t, cmd, "a qemu-img convert child", func() bool {
		img = childProcs(cmd.Process.Pid, "convert")
		return len(img) > 0
	})
	// the kernel kills it as virt exits; the copy of 1 GiB it was
	// starting takes several seconds here
	deadline := time.Now().Add(2 * time.Second)
	for alive(img[0]) {
		if time.Now().After(deadline) {
			t.Fatalf("qemu-img convert (pid %d) still runs 2 s after virt was killed -9", img[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	orphans := gcList(t, root)
	var dirs []string
	for _, o := range orphans {
		if o.Kept != "" || o.InQEMU() {
			t.Errorf("gc --dry-run: %+v; want nothing kept or in a QEMU", o)
		}
		dirs = append(dirs, o.Path)
	}
	if len(dirs) == 0 {
		t.Errorf("gc --dry-run lists nothing; want the killed clone's directory")
	}
	v(t, root, "vm", "gc")
	for _, d := range dirs {
		if fileExists(d) {
			t.Errorf("after gc: %s still there", d)
		}
	}
	v(t, root, "vm", "start", "src")
}

// A full clone of a running source killed -9 while QEMU's backup job
// copies: gc --dry-run names the job and its target node and keeps the
// clone's directory (QEMU writes a file in it); the next command under
// the source's lock (a pause) cancels and dismisses the job and deletes
// the node, after which QEMU holds no file of the clone and gc removes
// its directory.
func TestIntegrationVMCloneKillRunningBackup(t *testing.T) {
	root := vmRoot(t)
	uid, _ := killSource(t, root, true)
	pid := entry(t, root, "src").PID
	vms := filepath.Join(root, "var/lib/virtcon/vms")
	cmd := startVirt(t, root, "vm", "clone", "src", "c")
	var target string
	killWhen(t, cmd, "the backup target growing", func() bool {
		ds, _ := filepath.Glob(filepath.Join(vms, "*", "disk-root.qcow2"))
		for _, d := range ds {
			if strings.Contains(d, uid) {
				continue
			}
			if fi, err := os.Stat(d); err == nil && fi.Size() > 16<<20 {
				target = filepath.Dir(d)
				return true
			}
		}
		return false
	})
	var inQEMU []string
	kept := false
	for _, o := range gcList(t, root) {
		if o.InQEMU() {
			inQEMU = append(inQEMU, o.Path)
		}
		if o.Path == target && strings.Contains(o.Kept, "open by QEMU pid "+strconv.Itoa(pid)) {
			kept = true
		}
	}
	if len(inQEMU) == 0 {
		t.Errorf("gc --dry-run after the kill lists no job or node in the source's QEMU")
	}
	if !kept {
		t.Errorf("gc --dry-run after the kill: %s not kept as open by QEMU pid %d", target, pid)
	}
	if open := openUnder(pid, target); len(open) == 0 {
		t.Fatalf("the source's QEMU holds no file of the clone after the kill: was the job hit?")
	}
	v(t, root, "vm", "pause", "src")
	v(t, root, "vm", "resume", "src")
	if open := openUnder(pid, target); len(open) > 0 {
		t.Errorf("after the next command on the source, its QEMU still holds %v", open)
	}
	for _, o := range gcList(t, root) {
		if o.InQEMU() || o.Kept != "" {
			t.Errorf("gc --dry-run after the sweep: %+v; want no job, node or kept file", o)
		}
	}
	v(t, root, "vm", "gc")
	if fileExists(target) {
		t.Errorf("after gc: %s still there", target)
	}
	if e := entry(t, root, "src"); e.Phase != vm.PhaseRunning || e.PID != pid {
		t.Errorf("source after all: %s pid %d; want running as pid %d", e.Phase, e.PID, pid)
	}
}

// A linked clone of a running source killed -9 once its new overlay
// exists (live-root-<id>.qcow2; before, during or just after QEMU's
// transaction, wherever the kill lands): gc --dry-run names what is left
// in the source's directory, the next clone of the source cleans it up
// (nothing left but files in use, frozen layers 0444), and the guest's
// data is what it wrote, live and after a stop and start.
func TestIntegrationVMCloneKillLinkedRunning(t *testing.T) {
	g := requireGuest(t)
	requireTool(t, "qemu-io")
	root := vmRoot(t)
	var src vm.Entry
	out := v(t, root, "vm", "create", "src", "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "128", "--disk", "32M",
		"--cmdline", "console=ttyS0 quiet", "--start", "-o", "json")
	if err := json.Unmarshal([]byte(out), &src); err != nil {
		t.Fatal(err)
	}
	waitLog(t, root, src.UID, "VIRTCON-INSTANCE-ID="+src.UID, 90*time.Second)
	guestWrite(t, root, "src", 100, "KILLMRK1")
	dir := filepath.Join(root, "var/lib/virtcon/vms", src.UID)

	cmd := startVirt(t, root, "vm", "clone", "src", "c", "--linked")
	killWhen(t, cmd, "the source's new overlay", func() bool {
		l, _ := filepath.Glob(filepath.Join(dir, "live-*.qcow2"))
		return len(l) > 0
	})
	var left []string
	for _, o := range gcList(t, root) {
		if strings.HasPrefix(o.Path, dir+"/") {
			if !strings.Contains(o.What, "linked clone") && !strings.Contains(o.What, "second name") {
				t.Errorf("gc --dry-run: %s listed as %q; want it said what a linked clone left", o.Path, o.What)
			}
			left = append(left, filepath.Base(o.Path)+" ("+o.What+o.Fix+")")
		}
	}
	t.Logf("left in the source's directory after the kill: %v", left)
	if len(left) == 0 {
		t.Errorf("gc --dry-run lists nothing in the source's directory after the kill")
	}

	v(t, root, "vm", "clone", "src", "c2", "--linked")
	for _, o := range gcList(t, root) {
		if strings.HasPrefix(o.Path, dir+"/") {
			t.Errorf("gc --dry-run after the next clone: %s (%s%s); want nothing left in the source's directory", o.Path, o.What, o.Fix)
		}
	}
	frozen, _ := filepath.Glob(filepath.Join(dir, "frozen-*.qcow2"))
	for _, f := range frozen {
		if fi, err := os.Stat(f); err == nil && fi.Mode().Perm() != 0o444 {
			t.Errorf("%s: mode %v after the next clone; want 0444", filepath.Base(f), fi.Mode().Perm())
		}
	}
	if got := guestRead(t, root, "src", 100); got != "KILLMRK1" {
		t.Errorf("source guest reads %q at sector 100; want KILLMRK1", got)
	}
	guestWrite(t, root, "src", 101, "KILLMRK2")
	v(t, root, "vm", "stop", "src", "--force")
	v(t, root, "vm", "start", "src")
	waitLog(t, root, src.UID, "VIRTCON-INSTANCE-ID="+src.UID, 90*time.Second)
	for sector, want := range map[int]string{100: "KILLMRK1", 101: "KILLMRK2"} {
		if got := guestRead(t, root, "src", sector); got != want {
			t.Errorf("source guest after stop and start reads %q at sector %d; want %s", got, sector, want)
		}
	}
	for _, d := range []string{"disk-root.qcow2"} {
		if o, err := exec.Command("qemu-img", "check", "-U", "-q", filepath.Join(dir, d)).CombinedOutput(); err != nil {
			t.Errorf("qemu-img check %s: %v: %s", d, err, o)
		}
	}
}
