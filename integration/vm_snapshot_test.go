//go:build integration

package integration

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// snapshotGuest creates and starts the test guest with a blank 64 MiB
// qcow2 disk (/dev/vda in the guest) and waits for it to be ready.
func snapshotGuest(t *testing.T, name string) (root, uid, disk string) {
	t.Helper()
	g := requireGuest(t)
	root = vmRoot(t)
	var e vm.Entry
	out := v(t, root, "vm", "create", name, "--kernel", g.kernel, "--initrd", g.initrd, "--memory", "256", "--disk", "64M",
		"--cmdline", "console=ttyS0 quiet", "--start", "-o", "json")
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	waitLog(t, root, e.UID, "VIRTCON-GUEST-READY", 60*time.Second)
	return root, e.UID, filepath.Join(root, "var/lib/virtcon/vms", e.UID, "disk-root.qcow2")
}

// guestSays types command on the console and waits for want.
func guestSays(t *testing.T, root, name, command, want string) string {
	t.Helper()
	out, err := consoleSession(root, name, command, want, 30*time.Second)
	if err != nil {
		t.Errorf("console exited with %v after Ctrl-]", err)
	}
	if !strings.Contains(out, want) {
		t.Fatalf("console: no %q after %q; got %q", want, command, out)
	}
	return out
}

// writeMarker writes marker to the first sector of the guest's disk,
// past its page cache, and reads it back.
func writeMarker(t *testing.T, root, name, marker string) {
	t.Helper()
	guestSays(t, root, name, "echo "+marker+" | dd of=/dev/vda bs=512 count=1 conv=sync,fsync 2>/dev/null; sync; echo WROTE-$((40+2))", "WROTE-42")
	if got := readMarker(t, root, name); got != marker {
		t.Fatalf("the guest's disk after writing %s reads %q", marker, got)
	}
}

var diskRE = regexp.MustCompile(`DISK=\[(M[0-9])\]`)

// readMarker reads the first two bytes of the guest's disk, bypassing its
// page cache.
func readMarker(t *testing.T, root, name string) string {
	t.Helper()
	out := guestSays(t, root, name, `echo 3 >/proc/sys/vm/drop_caches; echo "DI""SK=[$(dd if=/dev/vda bs=2 count=1 2>/dev/null)]"`, "DISK=[")
	m := diskRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no DISK=[...] marker read back: %q", out)
	}
	return m[1]
}

// imgCheck runs qemu-img check on the disk; shared: the VM runs (only
// corruption counts then, not leaks of an image open for writing).
func imgCheck(t *testing.T, disk string, shared bool) {
	t.Helper()
	args := []string{"check", disk}
	if shared {
		args = []string{"check", "-U", disk}
	}
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	if err != nil && !(shared && !strings.Contains(string(out), "corruption")) {
		t.Errorf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func snapshotList(t *testing.T, root, name string) map[string]vm.Snapshot {
	t.Helper()
	var rows []vm.Snapshot
	if err := json.Unmarshal([]byte(v(t, root, "vm", "snapshot", "list", name, "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	out := map[string]vm.Snapshot{}
	for _, r := range rows {
		out[r.Name] = r
	}
	return out
}

// A disk snapshot of a running guest, restored, brings back what the
// guest wrote to its disk before it; the restore of a running VM needs
// --force; a VM with snapshots is not deleted without --with-snapshots.
func TestIntegrationVMSnapshotDisk(t *testing.T) {
	root, uid, disk := snapshotGuest(t, "s1")
	writeMarker(t, root, "s1", "M1")
	v(t, root, "vm", "snapshot", "create", "s1", "before")
	imgCheck(t, disk, true)
	writeMarker(t, root, "s1", "M2")
	if s, ok := snapshotList(t, root, "s1")["before"]; !ok || s.Memory || len(s.Disks) != 1 {
		t.Errorf("snapshot list: before = %+v (listed %v); want a disk-only snapshot of one disk", s, ok)
	}
	r := virt(t, nil, "--root", root, "vm", "snapshot", "create", "s1", "before")
	if r.code != 1 || !strings.Contains(r.stderr, `"before"`) || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("second snapshot named before: exit %d, stderr %q; want exit 1, already exists", r.code, r.stderr)
	}
	r = virt(t, nil, "--root", root, "vm", "snapshot", "restore", "s1", "before")
	if r.code != 2 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("restore of the running VM without --force: exit %d, stderr %q; want exit 2 and a hint", r.code, r.stderr)
	}
	if got := readMarker(t, root, "s1"); got != "M2" {
		t.Fatalf("after the refused restore the disk reads %q; want M2 (untouched)", got)
	}
	boots := strings.Count(serialLog(root, uid), "VIRTCON-GUEST-READY")
	v(t, root, "vm", "snapshot", "restore", "s1", "before", "--force")
	if e := entry(t, root, "s1"); e.Phase != vm.PhaseRunning {
		t.Fatalf("after the forced restore: phase %s; want Running again", e.Phase)
	}
	for deadline := time.Now().Add(60 * time.Second); strings.Count(serialLog(root, uid), "VIRTCON-GUEST-READY") <= boots; {
		if time.Now().After(deadline) {
			t.Fatalf("the restored guest did not boot again; log:\n%s", serialLog(root, uid))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := readMarker(t, root, "s1"); got != "M1" {
		t.Errorf("after restoring before, the disk reads %q; want M1, written before the snapshot", got)
	}
	imgCheck(t, disk, true)

	// a disk hot-plugged since: the old snapshot is refused, a new one
	// holds both disks
	v(t, root, "vm", "disk", "add", "s1", "--size", "16M", "--name", "data")
	r = virt(t, nil, "--root", root, "vm", "snapshot", "restore", "s1", "before", "--force")
	if r.code != 1 || !strings.Contains(r.stderr, "another disk layout") || !strings.Contains(r.stderr, "data") {
		t.Errorf("restore after a disk was added: exit %d, stderr %q; want exit 1, the layout error naming the new disk", r.code, r.stderr)
	}
	if got := readMarker(t, root, "s1"); got != "M1" {
		t.Errorf("after the refused restore the disk reads %q; want M1 (untouched)", got)
	}
	v(t, root, "vm", "snapshot", "create", "s1", "both")
	if s := snapshotList(t, root, "s1")["both"]; len(s.Disks) != 2 {
		t.Errorf("snapshot of a VM with a hot-plugged disk: %+v; want both disks", s)
	}

	r = virt(t, nil, "--root", root, "vm", "delete", "s1", "--force")
	if r.code != 2 || !strings.Contains(r.stderr, "has snapshots (before, both)") || !strings.Contains(r.stderr, "--with-snapshots") {
		t.Errorf("delete of a VM with a snapshot: exit %d, stderr %q; want exit 2 naming it, with the --with-snapshots hint", r.code, r.stderr)
	}
	if e := entry(t, root, "s1"); e.Phase != vm.PhaseRunning {
		t.Errorf("after the refused delete: %s; want the VM running on", e.Phase)
	}
	v(t, root, "vm", "stop", "s1", "--force")
	imgCheck(t, disk, false)
	v(t, root, "vm", "delete", "s1", "--with-snapshots")
	if _, ok := listVMs(t, root)["s1"]; ok {
		t.Errorf("s1 listed after delete --with-snapshots")
	}
}

var snapCountRE = regexp.MustCompile(`CNT=(\d+)\r?\n`)

// waitCounter waits until the console's counter reached at least n.
func waitCounter(t *testing.T, root, uid string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c := snapCounters(serialLog(root, uid)); len(c) > 0 && c[len(c)-1] >= n {
			return
		}
	}
	t.Fatalf("the console's counter never reached %d; log:\n%s", n, serialLog(root, uid))
}

// snapCounters lists the CNT=n lines of s in order.
func snapCounters(s string) []int {
	var out []int
	for _, m := range snapCountRE.FindAllStringSubmatch(s, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// A memory snapshot restored resumes the guest where it was: a counter
// on its console goes on from the snapshot's value, not from the later one.
func TestIntegrationVMSnapshotMemory(t *testing.T) {
	root, uid, disk := snapshotGuest(t, "m1")
	guestSays(t, root, "m1", `(i=0; while :; do i=$((i+1)); echo "CNT=$i" >$VIRTCON_TTY; sleep 0.2; done) & echo LOOP-$((40+2))`, "LOOP-42")
	waitCounter(t, root, uid, 5)
	v(t, root, "vm", "snapshot", "create", "m1", "live", "--memory")
	atSnap := snapCounters(serialLog(root, uid))
	n := atSnap[len(atSnap)-1] // the guest's counter at the snapshot is at most n
	if s := snapshotList(t, root, "m1")["live"]; !s.Memory || s.SizeBytes <= 0 {
		t.Errorf("snapshot list: live = %+v; want memory yes and a size", s)
	}
	imgCheck(t, disk, true)
	waitCounter(t, root, uid, n+15)
	r := virt(t, nil, "--root", root, "vm", "snapshot", "restore", "m1", "live")
	if r.code != 2 || !strings.Contains(r.stderr, "--force") {
		t.Errorf("restore of the running VM without --force: exit %d, stderr %q; want exit 2 and a hint", r.code, r.stderr)
	}
	before := len(serialLog(root, uid))
	late := snapCounters(serialLog(root, uid))
	last := late[len(late)-1]
	v(t, root, "vm", "snapshot", "restore", "m1", "live", "--force")
	var after []int
	for deadline := time.Now().Add(20 * time.Second); len(after) < 3 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		after = snapCounters(serialLog(root, uid)[before:])
	}
	if len(after) < 3 {
		t.Fatalf("no counter on the console after the restore: %q", serialLog(root, uid)[before:])
	}
	// lines printed between the log read and the restore belong to the
	// old run: the restored guest is where its counter drops back
	i := 0
	for i < len(after) && after[i] > n+1 {
		i++
	}
	if i == len(after) || after[i] > n+1 || after[i] >= last {
		t.Fatalf("counter after the restore %v (snapshot at <= %d, %d before the restore); want it to go on from the snapshot", after, n, last)
	}
	t.Logf("counter: at most %d at the snapshot, %d before the restore, %v after it", n, last, after)
	if e := entry(t, root, "m1"); e.Phase != vm.PhaseRunning {
		t.Errorf("after restoring the memory snapshot: %s; want Running", e.Phase)
	}
	imgCheck(t, disk, true)

	// a stopped VM restored to a memory snapshot starts and resumes from it
	v(t, root, "vm", "stop", "m1", "--force")
	before = len(serialLog(root, uid))
	v(t, root, "vm", "snapshot", "restore", "m1", "live")
	after = nil
	for deadline := time.Now().Add(20 * time.Second); len(after) < 3 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		after = snapCounters(serialLog(root, uid)[before:])
	}
	if len(after) < 3 || after[0] > n+1 {
		t.Errorf("counter after restoring the stopped VM %v (snapshot at <= %d); want it to go on from the snapshot", after, n)
	}
	if e := entry(t, root, "m1"); e.Phase != vm.PhaseRunning {
		t.Errorf("after restoring the stopped VM to its memory snapshot: %s; want Running", e.Phase)
	}
	imgCheck(t, disk, true)
	v(t, root, "vm", "snapshot", "delete", "m1", "live")
	if l := snapshotList(t, root, "m1"); len(l) != 0 {
		t.Errorf("snapshots after the delete: %v; want none", l)
	}
	v(t, root, "vm", "stop", "m1", "--force")
	imgCheck(t, disk, false)
}
