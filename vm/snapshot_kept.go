package vm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A disk detached with its file kept (DetachDisk without Delete) leaves
// disk-NAME.qcow2 in the VM's directory, snapshots and all: a later disk
// add --name NAME attaches it again. A snapshot deleted meanwhile must go
// from that file too, or it comes back with the disk (on one disk only)
// and blocks its detach --delete.

// keptDiskFiles are the VM's kept disk files: disk-NAME.qcow2 in its
// directory for a NAME its spec no longer has, by NAME.
func (m *Manager) keptDiskFiles(vm *VirtualMachine) (map[string]string, error) {
	dir := m.layout().VMStateDir(vm.Metadata.UID)
	paths, err := filepath.Glob(filepath.Join(dir, "disk-*.qcow2"))
	if err != nil {
		return nil, err
	}
	kept := map[string]string{}
	for _, p := range paths {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "disk-"), ".qcow2")
		if slices.ContainsFunc(vm.Spec.Disks, func(d Disk) bool { return d.Name == name }) {
			continue
		}
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		kept[name] = p
	}
	return kept, nil
}

// deleteTagKept removes tag from every kept disk file that holds it. It
// runs before the attached disks are touched: a file it cannot read or
// change (a QEMU that still holds it open locks it) fails the delete,
// naming the detached disk and its file.
func (m *Manager) deleteTagKept(ctx context.Context, vm *VirtualMachine, tag string) error {
	kept, err := m.keptDiskFiles(vm)
	if err != nil || len(kept) == 0 {
		return err
	}
	names := make([]string, 0, len(kept))
	for n := range kept {
		names = append(names, n)
	}
	slices.Sort(names)
	img := ""
	for _, n := range names {
		p := kept[n]
		tags, err := m.diskSnapshotTags(ctx, p)
		if err != nil {
			return fmt.Errorf("detached disk %q (its file %s is kept): its snapshots cannot be read: %w", n, p, err)
		}
		if !slices.Contains(tags, tag) {
			continue
		}
		if img == "" {
			if img, err = m.qemuImg(); err != nil {
				return err
			}
		}
		if _, err := qemuImgOut(ctx, img, "snapshot", "-d", tag, p); err != nil {
			return fmt.Errorf("detached disk %q (its file %s is kept, with this snapshot): not removed from it, nor from the attached disks: %w", n, p, err)
		}
		m.log.Info("snapshot deleted from a kept disk file", "vm", vm.Metadata.Name, "disk", n, "snapshot", tag)
	}
	return nil
}
