package vm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrSnapshotShape is a memory snapshot whose machine (memory, CPUs,
// firmware, disks, NICs) is not the one its restore would load it into:
// QEMU reverts the disks, then fails to load the state, and the guest is
// lost on reverted disks.
var ErrSnapshotShape = errors.New("memory snapshot was taken of another machine")

// SnapshotShapeError is a restore refused for ErrSnapshotShape; Diffs
// name each difference for what it is ("memory 1024 MiB now
// (spec.memoryMiB), 512 MiB in the snapshot").
type SnapshotShapeError struct {
	VM, Name string
	Diffs    []string
}

func (e *SnapshotShapeError) Error() string {
	return fmt.Sprintf("vm %q: restore snapshot %q: %v: %s", e.VM, e.Name, ErrSnapshotShape, strings.Join(e.Diffs, "; "))
}

// Is makes errors.Is(err, ErrSnapshotShape) true.
func (e *SnapshotShapeError) Is(target error) bool { return target == ErrSnapshotShape }

// snapshotShapeDiffs words what differs between a memory snapshot's
// machine (then) and the one it would be loaded into (now), each for what
// it is, with the spec field that changes it. The machine type is not
// compared: spec.machine is always q35, which a QEMU resumed from a saved
// state names by its resolved type.
func snapshotShapeDiffs(then, now SavedShape) []string {
	var diffs []string
	add := func(what, field, now, then string) {
		diffs = append(diffs, fmt.Sprintf("%s %s now (%s), %s in the snapshot", what, now, field, then))
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		return "[" + strings.Join(l, ", ") + "]"
	}
	if then.MemoryMiB != now.MemoryMiB {
		add("memory", "spec.memoryMiB", fmt.Sprintf("%d MiB", now.MemoryMiB), fmt.Sprintf("%d MiB", then.MemoryMiB))
	}
	if then.CPUs != now.CPUs {
		add("CPUs", "spec.cpus", fmt.Sprint(now.CPUs), fmt.Sprint(then.CPUs))
	}
	if then.Firmware != now.Firmware {
		add("firmware", "spec.firmware", now.Firmware, then.Firmware)
	}
	if !slices.Equal(then.Disks, now.Disks) {
		add("disks", "spec.disks", list(now.Disks), list(then.Disks))
	}
	if !slices.Equal(then.NICs, now.NICs) {
		add("NICs", "spec.network", list(now.NICs), list(then.NICs))
	}
	if then.DirectBoot != now.DirectBoot {
		yes := func(b bool) string {
			if b {
				return "on"
			}
			return "off"
		}
		add("direct kernel boot", "spec.boot.kernel", yes(now.DirectBoot), yes(then.DirectBoot))
	}
	return diffs
}

// checkSnapshotShape compares a memory snapshot's recorded shape with
// that of the QEMU it would be loaded into: the running one's command
// line, or for a stopped VM the launch its start would make. Records from
// before shapes were kept are not checked.
func (m *Manager) checkSnapshotShape(s *snapshotSession, name string) error {
	rec := s.meta.Snapshots[name]
	if rec.Shape == nil {
		return nil
	}
	var now SavedShape
	if s.pid > 0 {
		argv := m.argv(s.pid)
		if len(argv) == 0 {
			return fmt.Errorf("the running QEMU's command line (pid %d) cannot be read: its devices cannot be compared with the memory snapshot's", s.pid)
		}
		now = shapeOf(argv)
	} else {
		l, err := m.launchFor(s.vm, "tcg") // the accelerator is not part of the shape
		if err != nil {
			return err
		}
		now = shapeOf(l.Args())
	}
	if diffs := snapshotShapeDiffs(*rec.Shape, now); len(diffs) > 0 {
		return &SnapshotShapeError{VM: s.vm.Metadata.Name, Name: name, Diffs: diffs}
	}
	return nil
}
