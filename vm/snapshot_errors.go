package vm

import (
	"errors"
	"fmt"
	"strings"
)

// ErrRestoreRunning is a restore refused because the VM runs and the
// caller did not force it (RestoreOptions.Force): the guest would lose
// what it did since the snapshot.
var ErrRestoreRunning = errors.New("restore of a running VM needs force")

// ErrHasSnapshots is a delete refused because the VM has snapshots
// (DeleteOptions.WithSnapshots deletes them with it).
var ErrHasSnapshots = errors.New("has snapshots")

// ErrSnapshotLayout is a snapshot taken with other disks than the VM has
// now: restoring it would leave disks at different points in time.
var ErrSnapshotLayout = errors.New("snapshot was taken with another disk layout")

// SnapshotNotFoundError is a snapshot name the VM does not have.
type SnapshotNotFoundError struct{ VM, Name string }

func (e *SnapshotNotFoundError) Error() string {
	return fmt.Sprintf("vm %q: snapshot %q: %v", e.VM, e.Name, ErrNotFound)
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *SnapshotNotFoundError) Is(target error) bool { return target == ErrNotFound }

// SnapshotExistsError is a snapshot name the VM already has, regardless
// of case: Existing is the name as the VM has it.
type SnapshotExistsError struct{ VM, Name, Existing string }

func (e *SnapshotExistsError) Error() string {
	if e.Existing != "" && e.Existing != e.Name {
		return fmt.Sprintf("vm %q: snapshot %q: %v as %q (snapshot names are unique regardless of case)", e.VM, e.Name, ErrExists, e.Existing)
	}
	return fmt.Sprintf("vm %q: snapshot %q: %v", e.VM, e.Name, ErrExists)
}

// Is makes errors.Is(err, ErrExists) true.
func (e *SnapshotExistsError) Is(target error) bool { return target == ErrExists }

// RestoreRunningError is a restore of a running VM without force.
type RestoreRunningError struct {
	VM, Name string
	PID      int
	Memory   bool // the snapshot holds RAM: the guest would jump back in place
}

func (e *RestoreRunningError) Error() string {
	return fmt.Sprintf("vm %q: restore snapshot %q: the VM is running (pid %d): %v", e.VM, e.Name, e.PID, ErrRestoreRunning)
}

// Is makes errors.Is(err, ErrRestoreRunning) true.
func (e *RestoreRunningError) Is(target error) bool { return target == ErrRestoreRunning }

// HasSnapshotsError is a delete of a VM that has snapshots.
type HasSnapshotsError struct {
	VM        string
	Snapshots []string
}

func (e *HasSnapshotsError) Error() string {
	return fmt.Sprintf("vm %q: delete: %v (%s)", e.VM, ErrHasSnapshots, strings.Join(e.Snapshots, ", "))
}

// Is makes errors.Is(err, ErrHasSnapshots) true.
func (e *HasSnapshotsError) Is(target error) bool { return target == ErrHasSnapshots }

// SnapshotLayoutError is a restore of a snapshot whose disks are not the
// VM's disks now (one added or removed since, or one without the
// snapshot).
type SnapshotLayoutError struct {
	VM, Name string
	Then     []string // the disks the snapshot was taken of
	Now      []string // the VM's disks
	Missing  []string // the VM's disks that do not hold the snapshot
}

func (e *SnapshotLayoutError) Error() string {
	msg := fmt.Sprintf("vm %q: restore snapshot %q: %v: taken of disks [%s], the VM has [%s]", e.VM, e.Name, ErrSnapshotLayout,
		strings.Join(e.Then, ", "), strings.Join(e.Now, ", "))
	if len(e.Missing) > 0 {
		msg += fmt.Sprintf("; not in the snapshot: %s", strings.Join(e.Missing, ", "))
	}
	return msg
}

// Is makes errors.Is(err, ErrSnapshotLayout) true.
func (e *SnapshotLayoutError) Is(target error) bool { return target == ErrSnapshotLayout }

// ErrSnapshotUnrecorded is a restore refused because the snapshot is not
// one virt recorded whole: its disk layout, devices and machine cannot be
// checked, and a restore into others loses the guest on reverted disks.
var ErrSnapshotUnrecorded = errors.New("snapshot is not recorded whole: it cannot be restored safely")

// SnapshotUnrecordedError is a restore of an unrecorded or partial
// snapshot (SnapshotUnrecorded, SnapshotPartial); Why says what is known.
type SnapshotUnrecordedError struct {
	VM, Name string
	State    SnapshotState
	Why      string
	Memory   bool
}

func (e *SnapshotUnrecordedError) Error() string {
	return fmt.Sprintf("vm %q: restore snapshot %q: %v: %s (%s)", e.VM, e.Name, ErrSnapshotUnrecorded, e.State, e.Why)
}

// Is makes errors.Is(err, ErrSnapshotUnrecorded) true.
func (e *SnapshotUnrecordedError) Is(target error) bool { return target == ErrSnapshotUnrecorded }
