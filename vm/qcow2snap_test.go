package vm

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The snapshot table read from the file is the one qemu-img info reports:
// names of every length (the entries' padding), dates, in order, for
// qcow2 versions 2 and 3; other files are errors, never an empty table.
func TestReadQcow2Snapshots(t *testing.T) {
	img, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img not installed (apt-get install qemu-utils)")
	}
	run := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command(img, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("qemu-img %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return out
	}
	dir := t.TempDir()
	for _, compat := range []string{"0.10", "1.1"} {
		p := filepath.Join(dir, "d"+compat+".qcow2")
		run("create", "-q", "-f", "qcow2", "-o", "compat="+compat, p, "16M")
		if got, err := readQcow2Snapshots(p); err != nil || len(got) != 0 {
			t.Errorf("compat %s, no snapshots: %v, %v; want none", compat, got, err)
		}
		names := []string{"a", "before-upgrade", "x1234567", strings.Repeat("n", 63), "v1.2_rc3"}
		for _, n := range names {
			run("snapshot", "-c", n, p)
		}
		run("snapshot", "-d", "x1234567", p) // a hole in the ids
		var info struct {
			Snapshots []qcowSnapshot `json:"snapshots"`
		}
		if err := json.Unmarshal(run("info", "--output=json", p), &info); err != nil {
			t.Fatal(err)
		}
		got, err := readQcow2Snapshots(p)
		if err != nil {
			t.Fatalf("compat %s: %v", compat, err)
		}
		if !slices.Equal(got, info.Snapshots) || len(got) != len(names)-1 {
			t.Errorf("compat %s: read %+v; qemu-img info says %+v", compat, got, info.Snapshots)
		}
	}
	raw := filepath.Join(dir, "raw.img")
	if err := os.WriteFile(raw, []byte("not a qcow2 image at all, just bytes: 72 of them or more, to fill a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readQcow2Snapshots(raw); !errors.Is(err, errNotQcow2) {
		t.Errorf("a raw file: %v; want errNotQcow2", err)
	}
	// a table past the end of the file: an error
	p := filepath.Join(dir, "d1.1.qcow2")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	trunc := filepath.Join(dir, "trunc.qcow2")
	if err := os.WriteFile(trunc, b[:1024], 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readQcow2Snapshots(trunc); err == nil {
		t.Errorf("a file cut before its snapshot table: %+v; want an error", got)
	}
	if _, err := readQcow2Snapshots(filepath.Join(dir, "none.qcow2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v; want ErrNotExist", err)
	}
}

// A disk-only snapshot of a stopped VM runs one qemu-img per disk, the
// snapshot itself: the tables before and after are read from the files
// (it used to run qemu-img info on every disk before and after, 2.2x
// the time of qemu-img snapshot -c alone).
func TestSnapshotStoppedOneQemuImgPerDisk(t *testing.T) {
	m, v := snapshotManager(t)
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	wrapper := filepath.Join(dir, "qemu-img")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\nexec " + m.opts.QEMUImg + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m.opts.QEMUImg = wrapper
	snap, err := m.CreateSnapshot(t.Context(), "snap", "s1", SnapshotOptions{})
	if err != nil || snap.State != SnapshotRecorded || !slices.Equal(snap.Disks, []string{"root", "data"}) {
		t.Fatalf("CreateSnapshot = %+v, %v", snap, err)
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := []string{"snapshot -c s1 " + m.diskPath(v.Metadata.UID, "root"), "snapshot -c s1 " + m.diskPath(v.Metadata.UID, "data")}
	if !slices.Equal(got, want) {
		t.Errorf("qemu-img ran %q; want only %q", got, want)
	}
}
