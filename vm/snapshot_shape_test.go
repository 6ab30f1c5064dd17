package vm

import (
	"slices"
	"testing"
)

// Each difference of a memory snapshot's machine is worded for what it
// is, with the spec field that changes it.
func TestSnapshotShapeDiffs(t *testing.T) {
	base := SavedShape{Firmware: "bios", CPUs: 2, MemoryMiB: 512, Disks: []string{"disk-root.qcow2 (qcow2)"}, NICs: []string{"virtio-net-pci 52:54:00:00:00:01 (tap)"}, DirectBoot: true}
	for _, tc := range []struct {
		name   string
		change func(*SavedShape)
		want   []string
	}{
		{"same", func(*SavedShape) {}, nil},
		{"memory", func(s *SavedShape) { s.MemoryMiB = 1024 }, []string{"memory 1024 MiB now (spec.memoryMiB), 512 MiB in the snapshot"}},
		{"cpus", func(s *SavedShape) { s.CPUs = 4 }, []string{"CPUs 4 now (spec.cpus), 2 in the snapshot"}},
		{"firmware", func(s *SavedShape) { s.Firmware = "uefi" }, []string{"firmware uefi now (spec.firmware), bios in the snapshot"}},
		{"disks", func(s *SavedShape) { s.Disks = append(s.Disks, "disk-data.qcow2 (qcow2)") },
			[]string{"disks [disk-root.qcow2 (qcow2), disk-data.qcow2 (qcow2)] now (spec.disks), [disk-root.qcow2 (qcow2)] in the snapshot"}},
		{"nics", func(s *SavedShape) { s.NICs = nil }, []string{"NICs none now (spec.network), [virtio-net-pci 52:54:00:00:00:01 (tap)] in the snapshot"}},
		{"boot", func(s *SavedShape) { s.DirectBoot = false }, []string{"direct kernel boot off now (spec.boot.kernel), on in the snapshot"}},
		{"machine alone", func(s *SavedShape) { s.Machine = "pc-q35-7.2" }, nil},
	} {
		now := base
		now.Disks, now.NICs = slices.Clone(base.Disks), slices.Clone(base.NICs)
		tc.change(&now)
		if got := snapshotShapeDiffs(base, now); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q; want %q", tc.name, got, tc.want)
		}
	}
}
