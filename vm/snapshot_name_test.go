package vm

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// A bad snapshot name is worded as one (not as an invalid virtual
// machine) and a long one is echoed by its start and length, not in full.
func TestSnapshotNameErrors(t *testing.T) {
	m, _ := snapshotManager(t)
	ctx := context.Background()
	long := "a" + strings.Repeat("b", 299)
	for _, tc := range []struct {
		name string
		op   func(name string) error
	}{
		{"create", func(n string) error { _, err := m.CreateSnapshot(ctx, "snap", n, SnapshotOptions{}); return err }},
		{"restore", func(n string) error { return m.RestoreSnapshot(ctx, "snap", n, RestoreOptions{}) }},
		{"delete", func(n string) error { return m.DeleteSnapshot(ctx, "snap", n) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op(long)
			if !errors.Is(err, ErrInvalidSnapshotName) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("a 300-character name: %v; want ErrInvalidSnapshotName (and ErrInvalid)", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "invalid snapshot name: snapshot: ") {
				t.Errorf("error %q; want it to begin %q", msg, "invalid snapshot name: snapshot: ")
			}
			if strings.Contains(msg, long) || !strings.Contains(msg, `"`+long[:shownValueMax]+`"… of 300 characters`) || len(msg) > 250 {
				t.Errorf("error %q (%d bytes); want the name cut to its first %d characters and its length", msg, len(msg), shownValueMax)
			}
			if err := tc.op("9lives"); err == nil || !strings.Contains(err.Error(), `(got "9lives")`) {
				t.Errorf("a short bad name: %v; want it echoed in full", err)
			}
		})
	}
}

// Snapshot names are unique regardless of case (as VM names): a second
// one differing only in case is refused, naming the one there; a name is
// found exactly, else regardless of case, and the operation acts on the
// tag as the disks spell it.
func TestSnapshotNamesIgnoreCase(t *testing.T) {
	m, v := snapshotManager(t)
	ctx := context.Background()
	if _, err := m.CreateSnapshot(ctx, "snap", "Before", SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := m.CreateSnapshot(ctx, "snap", "before", SnapshotOptions{})
	var ee *SnapshotExistsError
	if !errors.As(err, &ee) || !errors.Is(err, ErrExists) || ee.Existing != "Before" || !strings.Contains(err.Error(), `"Before"`) {
		t.Fatalf("snapshot before after Before: %v; want ErrExists naming Before", err)
	}
	if err := m.RestoreSnapshot(ctx, "snap", "BEFORE", RestoreOptions{}); err != nil {
		t.Errorf("restore BEFORE: %v; want Before restored", err)
	}
	if err := m.DeleteSnapshot(ctx, "snap", "before"); err != nil {
		t.Fatalf("delete before: %v; want Before deleted", err)
	}
	if list, err := m.ListSnapshots(ctx, "snap"); err != nil || len(list) != 0 {
		t.Errorf("after the delete: %+v, %v; want no snapshots", list, err)
	}
	// tags that differ only in case, made outside virt: only the exact
	// name finds either
	for _, d := range []string{"root", "data"} {
		for _, tag := range []string{"x1", "X1"} {
			if out, err := exec.Command(m.opts.QEMUImg, "snapshot", "-c", tag, m.diskPath(v.Metadata.UID, d)).CombinedOutput(); err != nil {
				t.Fatalf("qemu-img snapshot -c %s: %v: %s", tag, err, out)
			}
		}
	}
	if err := m.DeleteSnapshot(ctx, "snap", "x1"); err != nil {
		t.Errorf("delete x1 (exact): %v", err)
	}
	if err := m.DeleteSnapshot(ctx, "snap", "x1"); err != nil {
		t.Errorf("delete x1 again, X1 left: %v; want X1 deleted", err)
	}
	if _, err := m.CreateSnapshot(ctx, "snap", "X1", SnapshotOptions{}); err != nil {
		t.Errorf("create X1 after both went: %v", err)
	}
}

func TestLookupSnapshot(t *testing.T) {
	snaps := []Snapshot{{Name: "a1"}, {Name: "A1"}, {Name: "Keep"}}
	for _, tc := range []struct {
		name, want string
		err        error
	}{
		{"a1", "a1", nil},
		{"A1", "A1", nil},
		{"keep", "Keep", nil},
		{"KEEP", "Keep", nil},
		{"nope", "", ErrNotFound},
	} {
		got, err := lookupSnapshot(snaps, "vm1", tc.name)
		if got.Name != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("lookupSnapshot(%q) = %q, %v; want %q, %v", tc.name, got.Name, err, tc.want, tc.err)
		}
	}
	// neither spelled exactly: which one is meant cannot be told
	if _, err := lookupSnapshot([]Snapshot{{Name: "ab"}, {Name: "AB"}}, "vm1", "Ab"); !errors.Is(err, ErrInvalidSnapshotName) || !strings.Contains(err.Error(), `"ab", "AB"`) {
		t.Errorf("lookupSnapshot(Ab) among ab, AB = %v; want ErrInvalidSnapshotName naming both", err)
	}
}
