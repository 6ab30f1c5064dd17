package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidateSnapshotName(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"before-upgrade", true},
		{"s1", true},
		{"v1.2_rc3", true},
		{"A", true},
		{long, true},
		{long + "a", false},
		{"", false},
		{"1", false},       // a qcow2 id: qemu-img finds snapshots by id too
		{"2024-01", false}, // starts with a digit
		{"-x", false},
		{"x-", false},
		{"x.", false},
		{"a b", false},
		{"a/b", false},
		{"a,b", false},
		{"ü", false},
	} {
		fe := ValidateSnapshotName(tc.name)
		if (fe == nil) != tc.ok {
			t.Errorf("ValidateSnapshotName(%q) = %v; want ok %v", tc.name, fe, tc.ok)
		}
		if fe != nil && (!strings.Contains(fe.Error(), "snapshot") || !strings.Contains(fe.Error(), `"`+tc.name+`"`)) {
			t.Errorf("ValidateSnapshotName(%q) = %q; want the field and the value named", tc.name, fe)
		}
	}
}

// snapshotManager is a test manager with the real qemu-img and a stopped
// VM with two blank qcow2 disks.
func snapshotManager(t *testing.T) (*Manager, *VirtualMachine) {
	t.Helper()
	img, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img not installed (apt-get install qemu-utils)")
	}
	if _, err := exec.LookPath("qemu-io"); err != nil {
		t.Skip("qemu-io not installed (apt-get install qemu-utils)")
	}
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = img
	v := kernelVM("snap", testKernel(t))
	v.Spec.Disks = []Disk{{Name: "root", Size: "16M"}, {Name: "data", Size: "16M"}}
	return m, mustCreate(t, m, v)
}

// snapIO runs one qemu-io command on a disk file.
func snapIO(t *testing.T, path, command string) error {
	t.Helper()
	out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", command, path).CombinedOutput()
	if err != nil || strings.Contains(string(out), "Pattern verification failed") || strings.Contains(string(out), "failed") {
		return errors.New(strings.TrimSpace(string(out)))
	}
	return nil
}

func snapImgCheck(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("qemu-img", "check", "-q", path).CombinedOutput(); err != nil {
		t.Errorf("qemu-img check %s: %v: %s", path, err, out)
	}
}

// A stopped VM's snapshot is taken of every disk with qemu-img, listed
// from the files, restored (the data written before it is back on every
// disk) and deleted; names taken and bad names are refused.
func TestSnapshotStoppedLifecycle(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	root, data := m.diskPath(v.Metadata.UID, "root"), m.diskPath(v.Metadata.UID, "data")
	for _, p := range []string{root, data} {
		if err := snapIO(t, p, "write -P 0x41 0 64k"); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := m.CreateSnapshot(ctx, "snap", "before", SnapshotOptions{})
	if err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if snap.Name != "before" || snap.Memory || !slices.Equal(snap.Disks, []string{"root", "data"}) || snap.VMStateBytes != 0 || snap.State != SnapshotRecorded || snap.CreatedAt.IsZero() {
		t.Errorf("CreateSnapshot = %+v; want before, disk-only, disks root and data, recorded, no memory state and a date", snap)
	}
	if _, err := m.CreateSnapshot(ctx, "snap", "before", SnapshotOptions{}); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), `"before"`) {
		t.Errorf("a second snapshot named before: %v; want ErrExists naming it", err)
	}
	if _, err := m.CreateSnapshot(ctx, "snap", "1", SnapshotOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("snapshot named 1: %v; want ErrInvalid", err)
	}
	if _, err := m.CreateSnapshot(ctx, "snap", "mem", SnapshotOptions{Memory: true}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("memory snapshot of a stopped VM: %v; want ErrNotRunning", err)
	}
	for _, p := range []string{root, data} {
		if err := snapIO(t, p, "write -P 0x42 0 64k"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.CreateSnapshot(ctx, "snap", "after", SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := m.ListSnapshots(ctx, "snap")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"before", "after"}) {
		t.Errorf("ListSnapshots = %v; want [before after]", names)
	}
	if err := m.RestoreSnapshot(ctx, "snap", "before", RestoreOptions{}); err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	for _, p := range []string{root, data} {
		if err := snapIO(t, p, "read -P 0x41 0 64k"); err != nil {
			t.Errorf("%s after the restore: %v; want the data written before the snapshot", filepath.Base(p), err)
		}
		snapImgCheck(t, p)
	}
	if err := m.RestoreSnapshot(ctx, "snap", "nope", RestoreOptions{}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("restore of a missing snapshot: %v; want ErrNotFound naming it", err)
	}
	if err := m.DeleteSnapshot(ctx, "snap", "after"); err != nil {
		t.Fatal(err)
	}
	if list, _ = m.ListSnapshots(ctx, "snap"); len(list) != 1 || list[0].Name != "before" {
		t.Errorf("after deleting after: %+v; want only before", list)
	}
	if err := m.DeleteSnapshot(ctx, "snap", "after"); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete of a deleted snapshot: %v; want ErrNotFound", err)
	}
	for _, p := range []string{root, data} {
		snapImgCheck(t, p)
	}
}

// A VM with snapshots is not deleted unless asked; asked, it goes.
func TestDeleteVMWithSnapshots(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	if _, err := m.CreateSnapshot(ctx, "snap", "keep", SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	err := m.Delete(ctx, "snap", false)
	var hs *HasSnapshotsError
	if !errors.As(err, &hs) || !errors.Is(err, ErrHasSnapshots) || !slices.Equal(hs.Snapshots, []string{"keep"}) {
		t.Fatalf("Delete of a VM with a snapshot: %v; want *HasSnapshotsError naming keep", err)
	}
	if _, err := os.Stat(m.diskPath(v.Metadata.UID, "root")); err != nil {
		t.Errorf("refused delete lost the disk: %v", err)
	}
	if err := m.DeleteWith(ctx, "snap", DeleteOptions{Force: true}); !errors.Is(err, ErrHasSnapshots) {
		t.Errorf("DeleteWith Force only: %v; want ErrHasSnapshots", err)
	}
	if err := m.DeleteWith(ctx, "snap", DeleteOptions{WithSnapshots: true}); err != nil {
		t.Fatalf("DeleteWith WithSnapshots: %v", err)
	}
	if _, err := os.Stat(m.layout().VMStateDir(v.Metadata.UID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir after the delete: %v; want gone", err)
	}
}

// Snapshots are read from the disks: a disk that cannot be read fails the
// listing and the delete (closed), never an empty list.
func TestSnapshotsFailClosed(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	if err := os.WriteFile(m.diskPath(v.Metadata.UID, "data"), []byte("not a qcow2 image"), 0o600); err != nil {
		t.Fatal(err)
	}
	if list, err := m.ListSnapshots(ctx, "snap"); err == nil || !strings.Contains(err.Error(), `disk "data"`) {
		t.Errorf("ListSnapshots with a broken disk = %v, %v; want an error naming the disk", list, err)
	}
	if err := m.Delete(ctx, "snap", false); err == nil || !strings.Contains(err.Error(), "snapshots") {
		t.Errorf("Delete with a disk it cannot read: %v; want refused", err)
	}
	if _, err := os.Stat(m.store.specPath(v.Metadata.UID)); err != nil {
		t.Errorf("refused delete removed the spec: %v", err)
	}
}

// A restore of a snapshot taken with other disks is refused and changes
// nothing.
func TestRestoreOtherDiskLayout(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	root := m.diskPath(v.Metadata.UID, "root")
	if err := snapIO(t, root, "write -P 0x41 0 64k"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateSnapshot(ctx, "snap", "two-disks", SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := snapIO(t, root, "write -P 0x42 0 64k"); err != nil {
		t.Fatal(err)
	}
	// a third disk since the snapshot
	v, err := m.store.load(v.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	v.Spec.Disks = append(v.Spec.Disks, Disk{Name: "extra", Size: "16M"})
	if err := m.createDisks(ctx, v, v.Spec.Disks[2:]); err != nil {
		t.Fatal(err)
	}
	if err := m.store.save(v); err != nil {
		t.Fatal(err)
	}
	err = m.RestoreSnapshot(ctx, "snap", "two-disks", RestoreOptions{})
	var le *SnapshotLayoutError
	if !errors.As(err, &le) || !errors.Is(err, ErrSnapshotLayout) || !strings.Contains(err.Error(), "extra") || !strings.Contains(err.Error(), `"two-disks"`) {
		t.Fatalf("restore after a disk was added: %v; want *SnapshotLayoutError naming the snapshot and the new disk", err)
	}
	if err := snapIO(t, root, "read -P 0x42 0 64k"); err != nil {
		t.Errorf("root after the refused restore: %v; want unchanged", err)
	}
	// and one disk fewer
	v.Spec.Disks = v.Spec.Disks[:1]
	if err := m.store.save(v); err != nil {
		t.Fatal(err)
	}
	if err := m.RestoreSnapshot(ctx, "snap", "two-disks", RestoreOptions{}); !errors.Is(err, ErrSnapshotLayout) || !strings.Contains(err.Error(), "data") {
		t.Errorf("restore after a disk was removed: %v; want ErrSnapshotLayout naming it", err)
	}
}

// A snapshot that fails on one disk leaves no tag on the others.
func TestSnapshotFailureReverts(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	// a qemu-img that refuses to snapshot the data disk
	wrapper := filepath.Join(t.TempDir(), "qemu-img")
	script := "#!/bin/sh\ncase \"$1 $2 $*\" in \"snapshot -c\"*disk-data*) echo 'injected failure' >&2; exit 1;; esac\nexec " + m.opts.QEMUImg + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m.opts.QEMUImg = wrapper
	_, err := m.CreateSnapshot(ctx, "snap", "half", SnapshotOptions{})
	if err == nil || !strings.Contains(err.Error(), "injected failure") || !strings.Contains(err.Error(), `disk "data"`) {
		t.Fatalf("CreateSnapshot with a failing disk: %v; want the disk's failure", err)
	}
	out, err := exec.Command("qemu-img", "snapshot", "-l", m.diskPath(v.Metadata.UID, "root")).CombinedOutput()
	if err != nil || strings.Contains(string(out), "half") {
		t.Errorf("root disk after the failed snapshot: %v: %s; want no snapshot half", err, out)
	}
	if list, err := m.ListSnapshots(ctx, "snap"); err != nil || len(list) != 0 {
		t.Errorf("ListSnapshots after the failed snapshot = %+v, %v; want none", list, err)
	}
}

// liveSnapshotMonitor is a QMP monitor for a running VM with the disks
// root and data: tx answers the transaction, job the snapshot-save job's
// end ("" for success); tags are the snapshots query-block shows.
func liveSnapshotMonitor(tx any, jobErr string, tags *[]string, txArgs *string) *fakeMonitor {
	jobID := ""
	return &fakeMonitor{handle: func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "snapshot-save":
			var a struct {
				ID string `json:"job-id"`
			}
			json.Unmarshal(args, &a)
			jobID = a.ID
		case "query-block":
			var snaps []map[string]any
			for _, tag := range *tags {
				snaps = append(snaps, map[string]any{"name": tag, "date-sec": 1796168109, "vm-state-size": 0})
			}
			var out []map[string]any
			for i, d := range []string{"root", "data"} {
				out = append(out, map[string]any{"device": DiskDriveID(d), "inserted": map[string]any{
					"node-name": fmt.Sprintf("#block%d", i), "image": map[string]any{"actual-size": 1 << 20, "snapshots": snaps}}})
			}
			return out
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		case "transaction":
			*txArgs = string(args)
			return tx
		case "query-jobs":
			j := map[string]any{"id": jobID, "status": "concluded"}
			if jobErr != "" {
				j["error"] = jobErr
			}
			return []map[string]any{j}
		}
		return nil
	}}
}

// A running VM's disks are snapshotted in one transaction with the guest
// paused for it, and resumed whether it worked or not; a memory snapshot
// whose job failed is removed from every disk.
func TestSnapshotLive(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		opts   SnapshotOptions
		tx     any
		jobErr string
		want   string // the commands, in order
		err    string // "" for success
	}{
		{name: "disk-only", tx: nil, want: "query-block,query-status,stop,transaction,cont,query-block"},
		{name: "transaction fails", tx: qmpFail{"GenericError", "injected: no space on disk data"},
			want: "query-block,query-status,stop,transaction,cont", err: "injected: no space"},
		{name: "memory job fails", opts: SnapshotOptions{Memory: true}, jobErr: "injected: vmstate write failed",
			want: "query-block,snapshot-save,query-jobs,job-dismiss,blockdev-snapshot-delete-internal-sync,blockdev-snapshot-delete-internal-sync", err: "injected: vmstate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, v := snapshotManager(t)
			uid := v.Metadata.UID
			startFakeQEMU(t, m, m.opts.HostRoot, uid, nil)
			var tags []string
			var txArgs string
			mon := liveSnapshotMonitor(tc.tx, tc.jobErr, &tags, &txArgs)
			if tc.tx == nil && tc.jobErr == "" {
				// after the transaction the disks hold the tag
				inner := mon.handle
				mon.handle = func(cmd string, args json.RawMessage) any {
					r := inner(cmd, args)
					if cmd == "transaction" {
						tags = []string{"s"}
					}
					return r
				}
			}
			serveMonitor(t, m.runPath(uid, qmpSockName), mon)
			snap, err := m.CreateSnapshot(ctx, "snap", "s", tc.opts)
			if got := mon.gotString(); got != tc.want {
				t.Errorf("QMP commands %s; want %s", got, tc.want)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("CreateSnapshot = %v; want an error with %q", err, tc.err)
				}
				meta, _ := m.readSnapshotMeta(uid)
				if len(meta.Snapshots) != 0 {
					t.Errorf("record after the failure: %v; want none", meta.Snapshots)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(txArgs, `"device":"disk-root"`) || !strings.Contains(txArgs, `"device":"disk-data"`) || !slices.Equal(snap.Disks, []string{"root", "data"}) {
				t.Errorf("transaction %s, snapshot %+v; want both disks in one transaction", txArgs, snap)
			}
		})
	}
}

// A disk hot-plugged into a running VM that a linked clone then froze
// (blockdev-snapshot-sync put the overlay ov-… on its node disk-data):
// query-block knows it by its qdev and active node only. Snapshots find
// it, and snapshot its active layer, never the frozen node below, which
// would miss every write since the clone.
func TestSnapshotLiveHotplugAfterLinkedClone(t *testing.T) {
	ctx := context.Background()
	m, v := snapshotManager(t)
	uid := v.Metadata.UID
	startFakeQEMU(t, m, m.opts.HostRoot, uid, nil)
	var txArgs string
	var tags []string
	serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "query-block":
			var snaps []map[string]any
			for _, tag := range tags {
				snaps = append(snaps, map[string]any{"name": tag, "date-sec": 1796168109, "vm-state-size": 0})
			}
			img := map[string]any{"actual-size": 1 << 20, "snapshots": snaps}
			return []map[string]any{
				{"device": "disk-root", "qdev": "/machine/peripheral/blk-root/virtio-backend", "inserted": map[string]any{"node-name": "#block1", "image": img}},
				{"device": "", "qdev": "/machine/peripheral/blk-data/virtio-backend", "inserted": map[string]any{"node-name": "ov-0123abcd-1", "image": img}},
			}
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		case "transaction":
			txArgs = string(args)
			tags = []string{"s"}
		}
		return nil
	}})
	if _, err := m.ListSnapshots(ctx, "snap"); err != nil {
		t.Fatalf("ListSnapshots: %v; want the hot-plugged disk found by its qdev", err)
	}
	if _, err := m.CreateSnapshot(ctx, "snap", "s", SnapshotOptions{}); err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if !strings.Contains(txArgs, `"device":"disk-root"`) || !strings.Contains(txArgs, `"device":"ov-0123abcd-1"`) || strings.Contains(txArgs, `"disk-data"`) {
		t.Errorf("transaction %s; want disk-root and the active node ov-0123abcd-1, not the frozen disk-data", txArgs)
	}
}

// A memory snapshot holds the state of the devices it was taken with: a
// restore into a QEMU whose devices changed since (a NIC hot-plugged
// after it; a snapshot taken after a hot-plug, restored into a QEMU
// started since) is refused before snapshot-load, which would revert the
// disks and then fail to load the state, leaving the guest stopped on
// reverted disks with half-loaded RAM. The same hot-plugs in the same
// QEMU restore.
func TestRestoreMemorySnapshotAfterHotplug(t *testing.T) {
	ctx := context.Background()
	m, v := snapshotManager(t)
	uid := v.Metadata.UID
	q := startFakeQEMU(t, m, m.opts.HostRoot, uid, nil)
	var tags []string
	jobID := ""
	mon := &fakeMonitor{handle: func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "snapshot-save", "snapshot-load":
			var a struct {
				ID  string `json:"job-id"`
				Tag string `json:"tag"`
			}
			json.Unmarshal(args, &a)
			jobID = a.ID
			if cmd == "snapshot-save" {
				tags = append(tags, a.Tag)
			}
		case "query-jobs":
			return []map[string]any{{"id": jobID, "status": "concluded"}}
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		case "query-block":
			var out []map[string]any
			for i, d := range []string{"root", "data"} {
				var snaps []map[string]any
				for _, tag := range tags {
					snaps = append(snaps, map[string]any{"name": tag, "date-sec": 1796168109, "vm-state-size": 4096 * (1 - i)})
				}
				out = append(out, map[string]any{"device": DiskDriveID(d), "inserted": map[string]any{
					"node-name": fmt.Sprintf("#block%d", i), "image": map[string]any{"actual-size": 1 << 20, "snapshots": snaps}}})
			}
			return out
		}
		return nil
	}}
	serveMonitor(t, m.runPath(uid, qmpSockName), mon)
	if _, err := m.CreateSnapshot(ctx, "snap", "before", SnapshotOptions{Memory: true}); err != nil {
		t.Fatalf("CreateSnapshot before: %v", err)
	}
	if err := m.recordHotplug(uid, q.pid, "nic 52:54:00:00:00:09 added"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateSnapshot(ctx, "snap", "after", SnapshotOptions{Memory: true}); err != nil {
		t.Fatalf("CreateSnapshot after: %v", err)
	}
	err := m.RestoreSnapshot(ctx, "snap", "before", RestoreOptions{Force: true})
	if !errors.Is(err, ErrHotplugged) || !strings.Contains(err.Error(), "nic 52:54:00:00:00:09 added") {
		t.Errorf("restore of the snapshot before the hot-plug: got %v; want ErrHotplugged naming the NIC", err)
	}
	if got := mon.gotString(); strings.Contains(got, "snapshot-load") {
		t.Errorf("QMP commands %s; want no snapshot-load", got)
	}
	if err := m.RestoreSnapshot(ctx, "snap", "after", RestoreOptions{Force: true}); err != nil {
		t.Errorf("restore of the snapshot after the hot-plug, same QEMU: %v; want it restored", err)
	}
	// the snapshot "after" as if taken in a QEMU since ended: this one
	// has its command line's devices
	os.Remove(m.runPath(uid, hotplugRecordName))
	meta, err := m.readSnapshotMeta(uid)
	if err != nil {
		t.Fatal(err)
	}
	r := meta.Snapshots["after"]
	r.QEMUPID = q.pid + 1000
	meta.Snapshots["after"] = r
	if err := m.writeSnapshotMeta(uid, meta); err != nil {
		t.Fatal(err)
	}
	if err := m.RestoreSnapshot(ctx, "snap", "after", RestoreOptions{Force: true}); !errors.Is(err, ErrHotplugged) {
		t.Errorf("restore of a snapshot taken after a hot-plug in another QEMU: got %v; want ErrHotplugged", err)
	}
}

// A snapshot-load that fails has reverted the disks, maybe, and loaded
// part of the memory: the guest is powered off, never left stopped for a
// resume to run on, and the error says so.
func TestRestoreMemorySnapshotLoadFails(t *testing.T) {
	ctx := context.Background()
	m, v := snapshotManager(t)
	// this QEMU acknowledges quit and never ends: it is killed after ten
	// exchange bounds
	m.opts.QMPTimeout = 300 * time.Millisecond
	uid := v.Metadata.UID
	q := startFakeQEMU(t, m, m.opts.HostRoot, uid, nil)
	tags := []string{"before"}
	jobID, loading := "", false
	mon := &fakeMonitor{handle: func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "snapshot-load":
			var a struct {
				ID string `json:"job-id"`
			}
			json.Unmarshal(args, &a)
			jobID, loading = a.ID, true
		case "query-jobs":
			j := map[string]any{"id": jobID, "status": "concluded"}
			if loading {
				j["error"] = "injected: device state did not load"
			}
			return []map[string]any{j}
		case "query-status":
			return map[string]any{"status": "paused", "running": false}
		case "query-block":
			var out []map[string]any
			for i, d := range []string{"root", "data"} {
				var snaps []map[string]any
				for _, tag := range tags {
					snaps = append(snaps, map[string]any{"name": tag, "date-sec": 1796168109, "vm-state-size": 4096 * (1 - i)})
				}
				out = append(out, map[string]any{"device": DiskDriveID(d), "inserted": map[string]any{
					"node-name": fmt.Sprintf("#block%d", i), "image": map[string]any{"actual-size": 1 << 20, "snapshots": snaps}}})
			}
			return out
		}
		return nil
	}}
	serveMonitor(t, m.runPath(uid, qmpSockName), mon)
	if err := m.writeSnapshotMeta(uid, snapshotMeta{Snapshots: map[string]snapshotRecord{
		"before": {Memory: true, Disks: []string{"root", "data"}, QEMUPID: q.pid}}}); err != nil {
		t.Fatal(err)
	}
	err := m.RestoreSnapshot(ctx, "snap", "before", RestoreOptions{Force: true})
	if err == nil || !strings.Contains(err.Error(), "injected: device state") || !strings.Contains(err.Error(), "powered off") {
		t.Fatalf("restore with a failing snapshot-load: %v; want the job's error and that the guest was powered off", err)
	}
	// the kill is seen in the fake /proc first; the stand-in's reaper
	// closes exited just after
	select {
	case <-q.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("the QEMU (pid %d) still runs 10 s after a failed snapshot-load; want it powered off", q.pid)
	}
}

// A memory snapshot of a VM whose spec changed while it was stopped (a
// NIC added, memory changed) would load device state into another
// machine: the restore's shape check refuses it, naming the change (the
// same machine passes). qemu-img cannot make a memory snapshot, so the
// check is driven with the session a restore opens.
func TestRestoreMemorySnapshotOtherShape(t *testing.T) {
	m, v := snapshotManager(t)
	l, err := m.launchFor(v, "kvm")
	if err != nil {
		t.Fatal(err)
	}
	shape := shapeOf(l.Args())
	meta := snapshotMeta{Format: snapshotsFormat, Snapshots: map[string]snapshotRecord{
		"mem": {Memory: true, Disks: []string{"root", "data"}, Shape: &shape},
		"old": {Memory: true, Disks: []string{"root", "data"}}, // a record from before shapes
	}}
	same := &snapshotSession{vm: v, meta: meta}
	if err := m.checkSnapshotShape(same, "mem"); err != nil {
		t.Errorf("the same machine: %v; want it restored", err)
	}
	changed := *v
	changed.Spec.MemoryMiB *= 2
	changed.Spec.Network = []NIC{{Bridge: "br0", MAC: "52:54:00:00:00:42"}}
	s := &snapshotSession{vm: &changed, meta: meta}
	err = m.checkSnapshotShape(s, "mem")
	var se *SnapshotShapeError
	if !errors.As(err, &se) || !errors.Is(err, ErrSnapshotShape) || errors.Is(err, ErrSnapshotLayout) || strings.Contains(err.Error(), "disk layout") {
		t.Fatalf("memory and a NIC changed: %v; want *SnapshotShapeError, not a disk layout error", err)
	}
	wantMem := fmt.Sprintf("memory %d MiB now (spec.memoryMiB), %d MiB in the snapshot", changed.Spec.MemoryMiB, v.Spec.MemoryMiB)
	if len(se.Diffs) != 2 || se.Diffs[0] != wantMem || !strings.HasPrefix(se.Diffs[1], "NICs [") || !strings.Contains(se.Diffs[1], "52:54:00:00:00:42 (tap)] now (spec.network), [") {
		t.Errorf("diffs %q; want %q and the NICs named", se.Diffs, wantMem)
	}
	if err := m.checkSnapshotShape(s, "old"); err != nil {
		t.Errorf("a record without a shape: %v; want it not checked", err)
	}
}
