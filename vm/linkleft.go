package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/virtcon/virtcon/qmp"
)

// What a linked clone cut short (virt killed -9) leaves in its source's
// directory, and what makes each file certainly unused or in use.
//
// linkDisks, running source: frozen-<disk>-<id> is made a second name of
// the live disk (mode 0600), then live-<disk>-<id> an empty overlay on
// it; QEMU moves onto the overlay (one transaction); disk-<disk> becomes
// a name of the overlay; the layer is made 0444. Stopped source: the disk
// is renamed to the frozen name and a new overlay takes the disk's name.
// A kill between two steps leaves:
//   - a frozen name of the live disk (nothing reads it by that name): the
//     name is removed;
//   - an overlay QEMU never moved onto (an empty file nothing reads): it
//     is removed; a stopped VM's overlay that holds data over the very
//     file that is its disk is what its QEMU ran on (only a QEMU writes
//     it), and becomes its disk again;
//   - a running QEMU on the overlay while disk-<disk> still names the old
//     file (the next start would boot the frozen layer): the disk's name
//     is moved onto the overlay, as the clone would have;
//   - a stopped source's disk renamed away with no overlay made: the
//     frozen file becomes the disk again;
//   - a frozen layer in use with mode 0600: it is made 0444.
//
// A file is in use when a clone's record names it, when it is in the
// backing chain of one of the VM's disks (as the files on disk say, and,
// running, as its QEMU says: query-block), or when any QEMU holds it
// open. What is neither certainly unused nor in use is listed, kept.

// linkLeft is one such file and what is done with it.
type linkLeft struct {
	path string
	what string
	// fix is a repair said in words; "" with kept empty: the file (that
	// name of it) is removed
	fix  string
	kept string // why nothing is done
	do   func() error
}

// liveChains is what a running QEMU reads: every file of its disks'
// chains (by name and by the backing names their headers give) and each
// disk's active layer.
type liveChains struct {
	files  map[string]bool
	active map[string]string // disk name -> active layer's file
}

// qmpImage is query-block's image info, down its backing chain.
type qmpImage struct {
	Filename            string    `json:"filename"`
	BackingFilename     string    `json:"backing-filename"`
	FullBackingFilename string    `json:"full-backing-filename"`
	BackingImage        *qmpImage `json:"backing-image"`
}

// readLiveChains asks the running QEMU which files its disks read.
func readLiveChains(ctx context.Context, mon *qmp.Monitor, disks []Disk) (*liveChains, error) {
	var blocks []struct {
		Device   string `json:"device"`
		Qdev     string `json:"qdev"`
		Inserted *struct {
			NodeName string   `json:"node-name"`
			Image    qmpImage `json:"image"`
		} `json:"inserted"`
	}
	if err := mon.Execute(ctx, "query-block", nil, &blocks); err != nil {
		return nil, fmt.Errorf("QMP query-block: %w", err)
	}
	lc := &liveChains{files: map[string]bool{}, active: map[string]string{}}
	for _, b := range blocks {
		if b.Inserted == nil {
			continue
		}
		for im := &b.Inserted.Image; im != nil; im = im.BackingImage {
			for _, f := range []string{im.Filename, im.FullBackingFilename} {
				if f != "" {
					lc.files[f] = true
				}
			}
		}
		for _, d := range disks {
			if isDiskBlock(d.Name, b.Device, b.Qdev, b.Inserted.NodeName) {
				lc.active[d.Name] = b.Inserted.Image.Filename
			}
		}
	}
	return lc, nil
}

// linkCandidates are the files of uid's directory a cut-short linked
// clone may have left: every live-* name, and the frozen layers that are
// not a finished one (mode 0444, one name). Cheap: no qemu-img.
func (m *Manager) linkCandidates(uid string) (live, frozen []string) {
	dir := m.layout().VMStateDir(uid)
	live, _ = filepath.Glob(filepath.Join(dir, "live-*.qcow2"))
	fs, _ := filepath.Glob(filepath.Join(dir, "frozen-*.qcow2"))
	for _, f := range fs {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		if fi.Mode().Perm() != 0o444 || nlink(fi) > 1 {
			frozen = append(frozen, f)
		}
	}
	return live, frozen
}

func nlink(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// sameFile reports whether a and b are names of one file.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// layerDisk is the disk a frozen-<disk>-<id>.qcow2 or live-<disk>-<id>.qcow2
// belongs to.
func layerDisk(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".qcow2")
	_, rest, _ := strings.Cut(base, "-")
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		return rest[:i]
	}
	return rest
}

// usedFiles is every file in use (see above) for vm, whose QEMU reads q
// (nil: stopped). It fails closed: a record or chain that cannot be read
// may name any file.
func (m *Manager) usedFiles(ctx context.Context, vm *VirtualMachine, q *liveChains) (*fileSet, error) {
	used := newFileSet()
	uids, err := m.store.uids()
	if err != nil {
		return nil, err
	}
	for _, u := range uids {
		rec, err := m.readCloneRecord(u)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			for _, p := range rec.Layers {
				used.add(p)
			}
		}
	}
	img, err := m.qemuImg()
	if err != nil {
		return nil, err
	}
	for _, d := range vm.Spec.Disks {
		p := m.diskPath(vm.Metadata.UID, d.Name)
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		chain, err := m.backingChain(ctx, img, p)
		if err != nil {
			return nil, fmt.Errorf("disk %q: %w", d.Name, err)
		}
		for _, c := range chain {
			used.add(c.Filename)
			if c.FullBackingFilename != "" {
				used.add(c.FullBackingFilename)
			}
		}
	}
	if q != nil {
		for f := range q.files {
			used.add(f)
		}
	}
	for _, p := range m.proc.scanAllQEMU() {
		for _, f := range m.proc.openFiles(p.PID) {
			used.add(f)
		}
	}
	return used, nil
}

// topHasData reports whether the overlay at path holds any data of its
// own (qemu-img map: an extent at depth 0).
func (m *Manager) topHasData(ctx context.Context, path string) (bool, error) {
	img, err := m.qemuImg()
	if err != nil {
		return false, err
	}
	out, err := qemuImgOut(ctx, img, "map", "-U", "-f", "qcow2", "--output=json", path)
	if err != nil {
		return false, err
	}
	var extents []struct {
		Depth int `json:"depth"`
	}
	if err := json.Unmarshal(out, &extents); err != nil {
		return false, fmt.Errorf("qemu-img map %s: %w", path, err)
	}
	for _, e := range extents {
		if e.Depth == 0 {
			return true, nil
		}
	}
	return false, nil
}

// linkLeftovers finds what cut-short linked clones left in vm's
// directory; q is what its QEMU reads (nil: stopped). With apply it does
// what it lists (the caller holds the VM's lock): the repairs first, then
// what is certainly unused is removed, from a fresh look.
func (m *Manager) linkLeftovers(ctx context.Context, vm *VirtualMachine, q *liveChains, apply bool) ([]linkLeft, error) {
	return m.linkLeftoversPass(ctx, vm, q, apply, true)
}

// linkLeftoversPass is linkLeftovers; repair says whether repairs are
// looked for (the pass after them looks no more).
func (m *Manager) linkLeftoversPass(ctx context.Context, vm *VirtualMachine, q *liveChains, apply, repair bool) ([]linkLeft, error) {
	uid := vm.Metadata.UID
	live, frozen := m.linkCandidates(uid)
	if len(live)+len(frozen) == 0 {
		return nil, nil
	}
	used, err := m.usedFiles(ctx, vm, q)
	if err != nil {
		return nil, fmt.Errorf("cannot tell which files linked clones left unused: %w", err)
	}
	var repairs []linkLeft
	for _, l := range live {
		if !repair {
			break
		}
		disk := m.diskPath(uid, layerDisk(l))
		if q != nil {
			if q.active[layerDisk(l)] == l && !sameFile(l, disk) {
				l := l
				repairs = append(repairs, linkLeft{path: l, what: "the overlay the VM's QEMU runs on, left by an unfinished linked clone",
					fix: "made " + filepath.Base(disk) + " a name of it, as the clone would have (the next start would have booted the frozen layer)",
					do:  func() error { return m.takeName(l, disk) }})
			}
			continue
		}
		fi, err := os.Stat(l)
		if err != nil || used.has(l) || nlink(fi) > 1 {
			continue
		}
		chain, err := m.backingChain(ctx, mustImg(m), l)
		if err != nil || chain[0].FullBackingFilename == "" || !sameFile(chain[0].FullBackingFilename, disk) {
			continue
		}
		data, err := m.topHasData(ctx, l)
		if err != nil {
			return nil, err
		}
		if data {
			l := l
			repairs = append(repairs, linkLeft{path: l, what: "an overlay left by an unfinished linked clone, holding what the VM wrote after its QEMU moved onto it",
				fix: "made it " + filepath.Base(disk) + " again (the disk's name still named the frozen layer under it)",
				do:  func() error { return renameSynced(l, disk) }})
		}
	}
	for _, f := range frozen {
		disk := m.diskPath(uid, layerDisk(f))
		if _, err := os.Lstat(disk); repair && q == nil && errors.Is(err, os.ErrNotExist) {
			f := f
			repairs = append(repairs, linkLeft{path: f, what: "the VM's disk, renamed by an unfinished linked clone of the stopped VM",
				fix: "made it " + filepath.Base(disk) + " again",
				do:  func() error { return renameSynced(f, disk) }})
		}
	}
	if apply && len(repairs) > 0 {
		for _, r := range repairs {
			if err := r.do(); err != nil {
				return repairs, fmt.Errorf("%s: %s: %w", r.path, r.fix, err)
			}
		}
		rest, err := m.linkLeftoversPass(ctx, vm, q, true, false)
		return append(repairs, rest...), err
	}
	if len(repairs) > 0 {
		return repairs, nil // the rest is told once the repairs are done
	}

	var out []linkLeft
	for _, l := range live {
		fi, err := os.Stat(l)
		if err != nil || used.has(l) {
			continue
		}
		disk := m.diskPath(uid, layerDisk(l))
		l := l
		rm := func() error { return os.Remove(l) }
		switch {
		case nlink(fi) > 1 && sameFile(l, disk):
			out = append(out, linkLeft{path: l, what: "a second name of " + filepath.Base(disk) + " that no QEMU uses (the name a linked clone's QEMU knew it by)", do: rm})
		case nlink(fi) > 1:
			out = append(out, linkLeft{path: l, what: "an overlay left by a linked clone", kept: "a second name of a file that is not the VM's disk: inspect it"})
		case q != nil:
			out = append(out, linkLeft{path: l, what: "unused overlay left by an unfinished linked clone (the VM's QEMU does not read it)", do: rm})
		default:
			data, err := m.topHasData(ctx, l)
			if err != nil {
				return nil, err
			}
			if data {
				out = append(out, linkLeft{path: l, what: "an overlay left by an unfinished linked clone", kept: "it holds data and is no overlay of the VM's disk: inspect it"})
				continue
			}
			out = append(out, linkLeft{path: l, what: "unused overlay left by an unfinished linked clone (empty)", do: rm})
		}
	}
	for _, f := range frozen {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		disk := m.diskPath(uid, layerDisk(f))
		f := f
		switch {
		case used.has(f) && fi.Mode().Perm() != 0o444:
			out = append(out, linkLeft{path: f, what: "frozen layer in use, left writable by an unfinished linked clone",
				fix: fmt.Sprintf("mode %#o -> 0444 (a frozen layer is read-only)", fi.Mode().Perm()),
				do:  func() error { return os.Chmod(f, 0o444) }})
		case used.has(f):
		case nlink(fi) > 1 && sameFile(f, disk):
			out = append(out, linkLeft{path: f, what: "frozen layer left by an unfinished linked clone (a second name of " + filepath.Base(disk) + ", which nothing reads by this name)",
				do: func() error { return os.Remove(f) }})
		default:
			out = append(out, linkLeft{path: f, what: "frozen layer left by a linked clone", kept: "nothing reads it, and it is no second name of the VM's disk: inspect it"})
		}
	}
	if apply {
		for _, l := range out {
			if l.do == nil {
				continue
			}
			if err := l.do(); err != nil {
				return out, fmt.Errorf("%s: %w", l.path, err)
			}
		}
		if len(out) > 0 {
			if err := syncDir(m.layout().VMStateDir(uid)); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// mustImg is qemu-img's path, "" when it cannot be found (the calls
// then fail with that).
func mustImg(m *Manager) string {
	img, _ := m.qemuImg()
	return img
}

func renameSynced(from, to string) error {
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return syncDir(filepath.Dir(to))
}

// cleanLinkLeftovers is linkLeftovers applied, by start and clone of the
// VM under its lock; mon is its QEMU's monitor (nil: stopped). What
// fails is logged: the command goes on (a kept file harms nothing).
func (m *Manager) cleanLinkLeftovers(ctx context.Context, vm *VirtualMachine, running bool) {
	if live, frozen := m.linkCandidates(vm.Metadata.UID); len(live)+len(frozen) == 0 {
		return
	}
	var q *liveChains
	if running {
		err := m.qmpDo(ctx, vm.Metadata.UID, func(ctx context.Context, mon *qmp.Monitor) error {
			var err error
			q, err = readLiveChains(ctx, mon, vm.Spec.Disks)
			return err
		})
		if err != nil {
			m.log.Warn("linked clone leftovers not looked at: QMP", "vm", vm.Metadata.Name, "err", err)
			return
		}
	}
	done, err := m.linkLeftovers(ctx, vm, q, true)
	for _, l := range done {
		switch {
		case l.kept != "":
			m.log.Warn("linked clone leftover kept", "vm", vm.Metadata.Name, "file", l.path, "what", l.what, "why", l.kept)
		case l.fix != "":
			m.log.Warn("linked clone leftover repaired", "vm", vm.Metadata.Name, "file", l.path, "what", l.what, "fix", l.fix)
		default:
			m.log.Info("linked clone leftover removed", "vm", vm.Metadata.Name, "file", l.path, "what", l.what)
		}
	}
	if err != nil {
		m.log.Warn("linked clone leftovers", "vm", vm.Metadata.Name, "err", err)
	}
}

// fileSet is a set of files by name, resolved: /proc/PID/fd and qemu-img
// name files by their resolved paths, the layout by its own, and a state
// directory under a symlink makes the two differ (a file in use must
// never look unused for that). Names, not inodes: a frozen layer left as
// a second name (hard link) of a live disk is unused though its inode is.
type fileSet struct{ paths map[string]bool }

func newFileSet() *fileSet { return &fileSet{paths: map[string]bool{}} }

func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func (s *fileSet) add(p string) {
	s.paths[p] = true
	s.paths[resolved(p)] = true
}

func (s *fileSet) has(p string) bool { return s.paths[p] || s.paths[resolved(p)] }
