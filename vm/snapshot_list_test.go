package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// snapTag makes a snapshot with qemu-img behind virt's back, as a
// snapshot command that died before its record was written leaves one.
func snapTag(t *testing.T, m *Manager, path, tag string) {
	t.Helper()
	if out, err := exec.Command(m.opts.QEMUImg, "snapshot", "-c", tag, path).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img snapshot -c %s %s: %v: %s", tag, path, err, out)
	}
}

// A tag on the disks without a record in snapshots.json is listed as
// unrecorded, one on only some disks as partial, each with why; neither
// is restored (nothing on the disks changes); both are deleted from every
// disk that holds them. Recorded ones list and restore as before.
func TestSnapshotUnrecorded(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	root, data := m.diskPath(v.Metadata.UID, "root"), m.diskPath(v.Metadata.UID, "data")
	if _, err := m.CreateSnapshot(ctx, "snap", "good", SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{root, data} {
		if err := snapIO(t, p, "write -P 0x41 0 64k"); err != nil {
			t.Fatal(err)
		}
		snapTag(t, m, p, "stray")
	}
	snapTag(t, m, root, "half")
	for _, p := range []string{root, data} {
		if err := snapIO(t, p, "write -P 0x42 0 64k"); err != nil {
			t.Fatal(err)
		}
	}
	list, err := m.ListSnapshots(ctx, "snap")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Snapshot{}
	for _, s := range list {
		got[s.Name] = s
	}
	for _, tc := range []struct {
		name  string
		state SnapshotState
		why   string
		disks string
	}{
		{"good", SnapshotRecorded, "", "root,data"},
		{"stray", SnapshotUnrecorded, "not in snapshots.json", "root,data"},
		{"half", SnapshotPartial, "only on disk root, not on data", "root"},
	} {
		s := got[tc.name]
		if s.State != tc.state || !strings.Contains(s.Why, tc.why) || (tc.why == "") != (s.Why == "") || strings.Join(s.Disks, ",") != tc.disks {
			t.Errorf("%s: state %q, why %q, disks %v; want %q, why with %q, disks %s", tc.name, s.State, s.Why, s.Disks, tc.state, tc.why, tc.disks)
		}
	}
	for _, name := range []string{"stray", "half"} {
		err := m.RestoreSnapshot(ctx, "snap", name, RestoreOptions{})
		var ue *SnapshotUnrecordedError
		if !errors.As(err, &ue) || !errors.Is(err, ErrSnapshotUnrecorded) || ue.Name != name || !strings.Contains(err.Error(), string(got[name].State)) {
			t.Errorf("restore %s: %v; want *SnapshotUnrecordedError naming it and its state", name, err)
		}
		for _, p := range []string{root, data} {
			if err := snapIO(t, p, "read -P 0x42 0 64k"); err != nil {
				t.Errorf("%s after the refused restore of %s: %v; want unchanged", p, name, err)
			}
		}
	}
	for _, name := range []string{"stray", "half"} {
		if err := m.DeleteSnapshot(ctx, "snap", name); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	}
	for _, p := range []string{root, data} {
		tags, err := m.diskSnapshotTags(ctx, p)
		if err != nil || strings.Join(tags, ",") != "good" {
			t.Errorf("%s after the deletes: tags %v, %v; want only good", p, tags, err)
		}
		snapImgCheck(t, p)
	}
	if err := m.RestoreSnapshot(ctx, "snap", "good", RestoreOptions{}); err != nil {
		t.Errorf("restore of the recorded snapshot: %v", err)
	}
}

// A memory snapshot left on the disks without a record (a --memory create
// that timed out, virt killed during it) is refused before snapshot-load,
// which would revert the disks and then fail to load a state of another
// machine; the refusal says why and that the QEMU was left alone.
func TestRestoreUnrecordedMemorySnapshot(t *testing.T) {
	ctx := context.Background()
	m, v := snapshotManager(t)
	uid := v.Metadata.UID
	q := startFakeQEMU(t, m, m.opts.HostRoot, uid, nil)
	mon := &fakeMonitor{handle: func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		case "query-block":
			var out []map[string]any
			for i, d := range []string{"root", "data"} {
				snaps := []map[string]any{{"name": "lost", "date-sec": 1796168109, "vm-state-size": (185 << 20) * (1 - i)}}
				out = append(out, map[string]any{"device": DiskDriveID(d), "inserted": map[string]any{
					"node-name": fmt.Sprintf("#block%d", i), "image": map[string]any{"actual-size": 1 << 30, "snapshots": snaps}}})
			}
			return out
		}
		return nil
	}}
	serveMonitor(t, m.runPath(uid, qmpSockName), mon)
	list, err := m.ListSnapshots(ctx, "snap")
	if err != nil || len(list) != 1 || list[0].State != SnapshotUnrecorded || !list[0].Memory || list[0].VMStateBytes != 185<<20 {
		t.Fatalf("ListSnapshots = %+v, %v; want lost, unrecorded, memory, 185 MiB of state", list, err)
	}
	err = m.RestoreSnapshot(ctx, "snap", "lost", RestoreOptions{Force: true})
	var ue *SnapshotUnrecordedError
	if !errors.As(err, &ue) || !ue.Memory || ue.State != SnapshotUnrecorded {
		t.Fatalf("restore of an unrecorded memory snapshot: %v; want *SnapshotUnrecordedError", err)
	}
	if got := mon.gotString(); strings.Contains(got, "snapshot-load") || strings.Contains(got, "stop") {
		t.Errorf("QMP commands %s; want no snapshot-load and no stop", got)
	}
	if !q.alive() {
		t.Errorf("the QEMU was ended by a refused restore")
	}
}

// Each snapshot's size is its own memory state: a disk-only snapshot is
// 0 (it used to count the disk file's allocation, memory state of the
// other snapshots included), a memory one its state's size.
func TestSnapshotSizeIsItsOwn(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	root := m.diskPath(v.Metadata.UID, "root")
	if err := snapIO(t, root, "write -P 0x41 0 4M"); err != nil {
		t.Fatal(err)
	}
	snap, err := m.CreateSnapshot(ctx, "snap", "disk-only", SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.VMStateBytes != 0 || snap.SizeBytes != 0 {
		t.Errorf("CreateSnapshot disk-only: vmstate %d, size %d; want 0 and 0 (no memory state; its disk data has no size of its own)", snap.VMStateBytes, snap.SizeBytes)
	}
	list, err := m.ListSnapshots(ctx, "snap")
	if err != nil || len(list) != 1 || list[0].SizeBytes != 0 || list[0].VMStateBytes != 0 {
		t.Errorf("ListSnapshots = %+v, %v; want disk-only with 0 bytes of memory state", list, err)
	}
	// with another snapshot's memory in the files: still each its own
	disks := []diskState{
		{disk: "root", snaps: []qcowSnapshot{{Name: "mem", VMStateSize: 185 << 20, DateSec: 1}, {Name: "d", DateSec: 2}}},
		{disk: "data", snaps: []qcowSnapshot{{Name: "mem", DateSec: 1}, {Name: "d", DateSec: 2}}},
	}
	meta := snapshotMeta{Snapshots: map[string]snapshotRecord{
		"mem": {Memory: true, Disks: []string{"root", "data"}, DiskBytes: 1 << 30},
		"d":   {Disks: []string{"root", "data"}, DiskBytes: 3 << 30},
	}}
	got := assembleSnapshots(disks, meta)
	if len(got) != 2 || got[0].VMStateBytes != 185<<20 || got[0].SizeBytes != 185<<20 || got[1].VMStateBytes != 0 || got[1].SizeBytes != 0 {
		t.Errorf("assembleSnapshots = %+v; want mem 185 MiB, d 0", got)
	}
}
