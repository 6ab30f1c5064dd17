package vm

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// SnapshotState says whether a snapshot is known well enough to restore.
type SnapshotState string

const (
	// SnapshotRecorded: in snapshots.json, and on every disk it was taken
	// of that the VM still has. Restores are checked against its record
	// (disk layout, devices, machine shape).
	SnapshotRecorded SnapshotState = "recorded"
	// SnapshotUnrecorded: on every disk of the VM but not in
	// snapshots.json: left by a snapshot command that did not finish (a
	// --memory job that timed out, virt killed), or made outside virt.
	// What it was taken of cannot be checked: restores are refused.
	SnapshotUnrecorded SnapshotState = "unrecorded"
	// SnapshotPartial: on only some of the disks it should be on (a tag
	// without a record on some disks, e.g. a disk detached with its file
	// and attached again; or a recorded one removed from a disk outside
	// virt). Restoring it would leave disks at different points in time:
	// refused.
	SnapshotPartial SnapshotState = "partial"
)

// whyUnrecorded is what an unrecorded snapshot is known to be.
const whyUnrecorded = "not in snapshots.json: made by a snapshot command that did not finish (or outside virt), so what it was taken of cannot be checked"

// assembleSnapshots joins the disks' tables with the record: every tag on
// any disk is a snapshot; the record says which disks it was taken of,
// and whether it is one virt finished making.
func assembleSnapshots(disks []diskState, meta snapshotMeta) []Snapshot {
	byName := map[string]*Snapshot{}
	var order []string
	for _, d := range disks {
		for _, s := range d.snaps {
			snap, ok := byName[s.Name]
			if !ok {
				snap = &Snapshot{Name: s.Name, CreatedAt: time.Unix(s.DateSec, s.DateNsec).UTC()}
				byName[s.Name] = snap
				order = append(order, s.Name)
			}
			snap.Disks = append(snap.Disks, d.disk)
			if s.VMStateSize > 0 {
				snap.Memory = true
				snap.VMStateBytes += s.VMStateSize
			}
		}
	}
	now := make([]string, len(disks))
	for i, d := range disks {
		now[i] = d.disk
	}
	out := make([]Snapshot, 0, len(order))
	for _, n := range order {
		s := byName[n]
		s.SizeBytes = s.VMStateBytes
		holding := s.Disks
		rec, ok := meta.Snapshots[n]
		switch {
		case ok:
			s.Disks = slices.Clone(rec.Disks)
			s.Memory = s.Memory || rec.Memory
			s.State = SnapshotRecorded
			// a disk it was taken of that the VM has but that lacks it
			var lost []string
			for _, d := range rec.Disks {
				if slices.Contains(now, d) && !slices.Contains(holding, d) {
					lost = append(lost, d)
				}
			}
			if len(lost) > 0 {
				s.State = SnapshotPartial
				s.Why = fmt.Sprintf("taken of disks %s, but not on %s any more (removed outside virt)", strings.Join(rec.Disks, ", "), strings.Join(lost, ", "))
			}
		case len(holding) < len(now):
			var without []string
			for _, d := range now {
				if !slices.Contains(holding, d) {
					without = append(without, d)
				}
			}
			s.State = SnapshotPartial
			s.Why = fmt.Sprintf("only on disk %s, not on %s, and not in snapshots.json: left by a snapshot command that did not finish, by a disk detached and attached again, or made outside virt",
				strings.Join(holding, ", "), strings.Join(without, ", "))
		default:
			s.State = SnapshotUnrecorded
			s.Why = whyUnrecorded
		}
		out = append(out, *s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// checkRecorded refuses to restore a snapshot virt cannot check: one not
// in snapshots.json (its disks, devices and machine are unknown: a memory
// one loaded into another machine fails half way, after the disks were
// reverted) or one on only some of its disks. Its shape cannot be proven
// from the disks either: the qcow2 table holds the memory state's size,
// not the machine it was saved from.
func checkRecorded(vmName string, snap Snapshot) error {
	if snap.State == SnapshotRecorded {
		return nil
	}
	return &SnapshotUnrecordedError{VM: vmName, Name: snap.Name, State: snap.State, Why: snap.Why, Memory: snap.Memory}
}
