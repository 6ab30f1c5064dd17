package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A snapshot deleted while a disk is detached with its file kept goes
// from that file too: re-attached, the disk brings no snapshot back, and
// its detach --delete is not blocked by one.
func TestDeleteSnapshotDetachedDisk(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	data := m.diskPath(v.Metadata.UID, "data")
	if _, err := m.CreateSnapshot(ctx, "snap", "s1", SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DetachDisk(ctx, "snap", "data", DiskDetachOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteSnapshot(ctx, "snap", "s1"); err != nil {
		t.Fatalf("delete s1 with data detached: %v", err)
	}
	if tags, err := m.diskSnapshotTags(ctx, data); err != nil || len(tags) != 0 {
		t.Errorf("the kept file of data after the delete: tags %v, %v; want none", tags, err)
	}
	snapImgCheck(t, data)
	if _, err := m.AddDisk(ctx, "snap", DiskAddOptions{Name: "data"}); err != nil {
		t.Fatal(err)
	}
	if list, err := m.ListSnapshots(ctx, "snap"); err != nil || len(list) != 0 {
		t.Errorf("snapshots after data came back: %+v, %v; want none", list, err)
	}
	if _, err := m.DetachDisk(ctx, "snap", "data", DiskDetachOptions{Delete: true}); err != nil {
		t.Errorf("detach --delete of data: %v; want it deleted (no snapshot in it)", err)
	}
}

// A kept file that something holds open (a QEMU that never let the
// detached disk go) cannot be changed: the delete fails naming the
// detached disk, and the snapshot stays on every disk, attached or not.
func TestDeleteSnapshotDetachedDiskHeld(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	root, data := m.diskPath(v.Metadata.UID, "root"), m.diskPath(v.Metadata.UID, "data")
	if _, err := m.CreateSnapshot(ctx, "snap", "s1", SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DetachDisk(ctx, "snap", "data", DiskDetachOptions{}); err != nil {
		t.Fatal(err)
	}
	// qemu-io holds the file open (and write-locked) until its stdin closes
	holder := exec.Command("qemu-io", "-f", "qcow2", data)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); holder.Wait() })
	// wait until its locks show in /proc/locks (QEMU locks bytes of the
	// image with OFD locks once it has opened it); a probe that opened
	// the file itself could take the lock first
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprintf(":%d ", fi.Sys().(*syscall.Stat_t).Ino)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, _ := os.ReadFile("/proc/locks"); strings.Contains(string(b), ino) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("qemu-io did not lock the kept file within 30 s")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for one
	}
	err = m.DeleteSnapshot(ctx, "snap", "s1")
	if err == nil || !strings.Contains(err.Error(), `detached disk "data"`) || !strings.Contains(err.Error(), data) {
		t.Fatalf("delete with the kept file held: %v; want refused naming the detached disk and its file", err)
	}
	for _, p := range []string{root, data} {
		if tags, err := m.diskSnapshotTags(ctx, p); err != nil || !slices.Contains(tags, "s1") {
			t.Errorf("%s after the refused delete: %v, %v; want s1 still there", p, tags, err)
		}
	}
	io.WriteString(stdin, "quit\n")
	stdin.Close()
	holder.Wait()
	if err := m.DeleteSnapshot(ctx, "snap", "s1"); err != nil && !errors.Is(err, ErrNotFound) {
		t.Errorf("delete once the file is let go: %v", err)
	}
	if tags, _ := m.diskSnapshotTags(ctx, data); len(tags) != 0 {
		t.Errorf("kept file after the delete: %v; want no tags", tags)
	}
}
