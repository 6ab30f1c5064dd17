//go:build integration

package integration

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The real-size tier's memory snapshot cases (vm_realsize_test.go has the
// guest and the checks).

// liveDisk is the qcow2 file the VM's root disk is on (a linked clone
// moves a running source onto a new overlay, linked as disk-root.qcow2).
func (b *bigVM) liveDisk() string { return filepath.Join(b.dir(), "disk-root.qcow2") }

// qcow2Snapshots reads the number of internal snapshots from a qcow2
// header (nb_snapshots, bytes 60..63): cheap enough to poll, and written
// by QEMU when a snapshot is complete.
func qcow2Snapshots(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	var h [64]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return -1
	}
	return int(binary.BigEndian.Uint32(h[60:64]))
}

// imgSnapshotTags lists the internal snapshots of a qcow2 file that may
// be open (-U).
func imgSnapshotTags(t *testing.T, path string) map[string]bool {
	t.Helper()
	out, err := exec.Command("qemu-img", "snapshot", "-U", "-l", path).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img snapshot -l %s: %v\n%s", path, err, out)
	}
	tags := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] != "ID" && f[0] != "Snapshot" {
			tags[f[1]] = true
		}
	}
	return tags
}

// recordedSnapshots are the names in the VM's snapshots.json.
func (b *bigVM) recordedSnapshots(t *testing.T) map[string]bool {
	t.Helper()
	var meta struct {
		Snapshots map[string]json.RawMessage `json:"snapshots"`
	}
	data, err := os.ReadFile(filepath.Join(b.dir(), "snapshots.json"))
	if os.IsNotExist(err) {
		return map[string]bool{}
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		t.Fatalf("snapshots.json: %v", err)
	}
	out := map[string]bool{}
	for k := range meta.Snapshots {
		out[k] = true
	}
	return out
}

// A memory snapshot of the big guest is made, listed with its ~770 MiB of
// state and recorded; restored in place and into the stopped VM, the
// guest's counter goes on from the snapshot.
func realMemorySnapshot(t *testing.T, b *bigVM) {
	b.ensureRunning(t)
	n := b.lastCounter()
	start := time.Now()
	r := virt(t, nil, "--root", b.root, "vm", "snapshot", "create", b.name, "rs1", "--memory")
	took := time.Since(start)
	t.Logf("vm snapshot create --memory of the 1 GiB guest: %v, exit %d", took.Round(time.Millisecond), r.code)
	if r.code != 0 {
		t.Fatalf("vm snapshot create --memory: exit %d: %s", r.code, r.stderr)
	}
	s, ok := snapshotList(t, b.root, b.name)["rs1"]
	if !ok || !s.Memory || s.SizeBytes < int64(realDirtyMiB)<<20 {
		t.Errorf("snapshot list: rs1 = %+v (listed %v); want memory yes, at least %d MiB", s, ok, realDirtyMiB)
	}
	if !b.recordedSnapshots(t)["rs1"] {
		t.Errorf("rs1 not in snapshots.json")
	}
	b.wantImagesClean(t)
	from := len(serialLog(b.root, b.uid))
	b.wantGoesOn(t, "after the snapshot", from, 0)

	// in place
	from = len(serialLog(b.root, b.uid))
	start = time.Now()
	r = virt(t, nil, "--root", b.root, "vm", "snapshot", "restore", b.name, "rs1", "--force")
	t.Logf("vm snapshot restore --force (in place): %v, exit %d", time.Since(start).Round(time.Millisecond), r.code)
	if r.code != 0 {
		t.Fatalf("vm snapshot restore --force: exit %d: %s", r.code, r.stderr)
	}
	b.wantRunning(t, "after the restore in place")
	b.wantGoesOn(t, "the restore in place", from, n+1)

	// from stopped
	v(t, b.root, "vm", "kill", b.name) // powered off at once: the restore, not a shutdown, is under test
	from = len(serialLog(b.root, b.uid))
	start = time.Now()
	r = virt(t, nil, "--root", b.root, "vm", "snapshot", "restore", b.name, "rs1")
	t.Logf("vm snapshot restore (stopped VM): %v, exit %d", time.Since(start).Round(time.Millisecond), r.code)
	if r.code != 0 {
		t.Fatalf("vm snapshot restore of the stopped VM: exit %d: %s", r.code, r.stderr)
	}
	b.wantRunning(t, "after the restore from stopped")
	b.wantGoesOn(t, "the restore from stopped", from, n+1)
	b.wantGuestData(t, "after the restores")
	b.wantImagesClean(t)
	v(t, b.root, "vm", "snapshot", "delete", b.name, "rs1")
	if tags := imgSnapshotTags(t, b.liveDisk()); len(tags) != 0 {
		t.Errorf("snapshots in the disk after the delete: %v", tags)
	}
}

// A memory snapshot create killed at three points: whatever the point,
// the guest runs on, and the snapshot is either absent, or listed,
// recorded and restorable, or listed as unrecorded and refused for
// restore; snapshot delete removes it from the disk.
func realKilledSnapshot(t *testing.T, b *bigVM) {
	disk := b.liveDisk()
	for i, mk := range []func() killPoint{
		b.lockPoint,
		func() killPoint {
			// not the file's size: qcow2 reuses the clusters of deleted
			// snapshots, so the file need not grow
			qpid := entry(t, b.root, b.name).PID
			w0 := qemuWritten(qpid)
			return killPoint{"during-ram-written", "its QEMU having written 64 MiB more (RAM being saved)", func(int) bool { return qemuWritten(qpid) >= w0+64<<20 }}
		},
		func() killPoint {
			n0 := qcow2Snapshots(disk)
			return killPoint{"after-tag-written", "the snapshot in the qcow2 header (QEMU's save done)", func(int) bool { return qcow2Snapshots(disk) > n0 }}
		},
	} {
		name := fmt.Sprintf("ks%d", i)
		b.ensureRunning(t) // before mk: a point may read the running QEMU
		p := mk()
		t.Run(p.id, func(t *testing.T) {
			t.Cleanup(func() { // whatever failed: the next cases need a VM without it
				if imgSnapshotTags(t, disk)[name] {
					virt(t, nil, "--root", b.root, "vm", "snapshot", "delete", b.name, name)
				}
			})
			from := len(serialLog(b.root, b.uid))
			runKilled(t, b.root, p, "vm", "snapshot", "create", b.name, name, "--memory")
			n := b.lastCounter()
			b.wantGoesOn(t, "after the kill", from, 0)
			b.wantRunning(t, "after the kill")
			gcDryRun(t, b.root, "after the kill")
			b.wantImagesClean(t)
			b.wantSnapshotAgrees(t, name, n)
			b.wantNoJobs(t, "after the kill and the snapshot's delete")
		})
	}
	b.ensureRunning(t)
	b.wantGuestData(t, "after the killed snapshots")
}

// wantSnapshotAgrees checks the disk, snapshots.json, snapshot list and a
// restore agree on name, then deletes it; n is the guest's counter when
// the command making it was killed.
func (b *bigVM) wantSnapshotAgrees(t *testing.T, name string, n int) {
	t.Helper()
	tags := imgSnapshotTags(t, b.liveDisk())
	rec := b.recordedSnapshots(t)[name]
	var rows []map[string]any
	r := virt(t, nil, "--root", b.root, "vm", "snapshot", "list", b.name, "-o", "json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rows) != nil {
		t.Fatalf("snapshot list: exit %d: %s", r.code, r.stderr)
	}
	var row map[string]any
	for _, x := range rows {
		if x["name"] == name {
			row = x
		}
	}
	rowJSON, _ := json.Marshal(row)
	t.Logf("%s: in the disk %v, in snapshots.json %v, listed %s", name, tags[name], rec, rowJSON)
	switch {
	case !tags[name]:
		if rec || row != nil {
			t.Errorf("%s is not in the disk but recorded %v / listed %s", name, rec, rowJSON)
		}
		return
	case rec:
		if row == nil || row["memory"] != true {
			t.Errorf("%s recorded but listed %s; want a memory snapshot", name, rowJSON)
		}
		from := len(serialLog(b.root, b.uid))
		if r := virt(t, nil, "--root", b.root, "vm", "snapshot", "restore", b.name, name, "--force"); r.code != 0 {
			t.Fatalf("restore of the recorded %s: exit %d: %s", name, r.code, r.stderr)
		}
		b.wantRunning(t, "after restoring "+name)
		b.wantGoesOn(t, "restoring "+name, from, n+1)
	default: // on the disk, not recorded: flagged and refused
		if row == nil || !strings.Contains(strings.ToLower(string(rowJSON)), "unrecorded") && row["recorded"] != false {
			t.Errorf("%s is in the disk, not in snapshots.json, listed %s; want it listed as unrecorded", name, rowJSON)
		}
		from := len(serialLog(b.root, b.uid))
		r := virt(t, nil, "--root", b.root, "vm", "snapshot", "restore", b.name, name, "--force")
		if r.code == 0 {
			t.Errorf("restore of the unrecorded %s: exit 0; want it refused", name)
		}
		b.wantRunning(t, "after the refused restore of "+name)
		if c := b.countersSince(from, 3, 60*time.Second); len(c) < 3 || c[0] < n {
			t.Errorf("after the refused restore of %s the counter printed %v; want it to go on from >= %d", name, c, n)
		}
	}
	if r := virt(t, nil, "--root", b.root, "vm", "snapshot", "delete", b.name, name); r.code != 0 {
		t.Errorf("snapshot delete %s: exit %d: %s", name, r.code, r.stderr)
	}
	if imgSnapshotTags(t, b.liveDisk())[name] || b.recordedSnapshots(t)[name] {
		t.Errorf("%s still in the disk or in snapshots.json after its delete", name)
	}
}

// qemuWritten is what process pid has written (wchar of /proc/PID/io,
// all its threads), -1 when it cannot be read.
func qemuWritten(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}
