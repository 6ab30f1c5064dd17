package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

// cloneManager is a test Manager with the real qemu-img.
func cloneManager(t *testing.T) *Manager {
	t.Helper()
	testutil.RequireCommand(t, "qemu-img", "apt-get install qemu-utils")
	testutil.RequireCommand(t, "qemu-io", "apt-get install qemu-utils")
	m, _, _ := newTestManager(t)
	img, _ := exec.LookPath("qemu-img")
	m.opts.QEMUImg = img
	return m
}

// cloneSource creates a stopped VM with two blank disks holding known
// data, a NIC with an explicit MAC, labels (a reserved one too) and UEFI
// variables of its own.
func cloneSource(t *testing.T, m *Manager, name string) *VirtualMachine {
	t.Helper()
	v := kernelVM(name, testKernel(t))
	v.Metadata.Labels = map[string]string{"team": "web"}
	v.Spec.Disks = []Disk{{Name: "root", Size: "8M"}, {Name: "data", Size: "4M"}}
	v.Spec.Network = []NIC{{Bridge: "br0", MAC: "52:54:00:aa:bb:cc"}, {Bridge: "br0"}}
	v, err := m.CreateWith(context.Background(), v, CreateOptions{DirectorGeneration: "7"})
	if err != nil {
		t.Fatal(err)
	}
	cloneIO(t, m.diskPath(v.Metadata.UID, "root"), "write -P 0x41 0 1M")
	cloneIO(t, m.diskPath(v.Metadata.UID, "data"), "write -P 0x42 1M 1M")
	if err := os.WriteFile(filepath.Join(m.layout().VMStateDir(v.Metadata.UID), "OVMF_VARS.fd"), []byte("nvram of the source"), 0o600); err != nil {
		t.Fatal(err)
	}
	return v
}

func cloneIO(t *testing.T, path, cmd string) string {
	t.Helper()
	out, err := exec.Command("qemu-io", "-c", cmd, path).CombinedOutput()
	if err != nil || strings.Contains(string(out), "failed") {
		t.Fatalf("qemu-io %q %s: %v: %s", cmd, path, err, out)
	}
	return string(out)
}

// readsPattern says whether the guest-visible bytes at off..off+n are all b.
func readsPattern(t *testing.T, path string, b byte, off, n string) bool {
	t.Helper()
	out, _ := exec.Command("qemu-io", "-r", "-U", "-c", "read -P 0x"+hex.EncodeToString([]byte{b})+" "+off+" "+n, path).CombinedOutput()
	return !strings.Contains(string(out), "Pattern verification failed") && strings.Contains(string(out), "read ")
}

func cloneImgCheck(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("qemu-img", "check", "-q", path).CombinedOutput(); err != nil {
		t.Errorf("qemu-img check %s: %v: %s", path, err, out)
	}
}

func backingOf(t *testing.T, m *Manager, path string) string {
	t.Helper()
	chain, err := m.backingChain(context.Background(), m.opts.QEMUImg, path)
	if err != nil {
		t.Fatal(err)
	}
	return chain[0].FullBackingFilename
}

// writableInodes maps the inode of every writable regular file under
// dir to its path.
func writableInodes(t *testing.T, dir string) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o222 != 0 {
			out[fi.Sys().(*syscall.Stat_t).Ino] = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// noSharedWritable fails when any writable file of one VM's directory
// is a file (inode) of the other's, or any file of the clone's chains
// that is writable lies outside its directory.
func noSharedWritable(t *testing.T, m *Manager, a, b *VirtualMachine) {
	t.Helper()
	ia := writableInodes(t, m.layout().VMStateDir(a.Metadata.UID))
	ib := writableInodes(t, m.layout().VMStateDir(b.Metadata.UID))
	if len(ib) == 0 {
		t.Fatal("the clone has no writable files")
	}
	for ino, p := range ib {
		if q, ok := ia[ino]; ok {
			t.Errorf("writable file shared: %s is %s (inode %d)", p, q, ino)
		}
	}
	for _, d := range b.Spec.Disks {
		chain, err := m.backingChain(context.Background(), m.opts.QEMUImg, m.diskPath(b.Metadata.UID, d.Name))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chain[1:] {
			fi, err := os.Stat(c.Filename)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o222 != 0 {
				t.Errorf("clone disk %q is backed by %s, which is writable (%v)", d.Name, c.Filename, fi.Mode())
			}
		}
	}
}

// dirState is a directory's file names, modes and content hashes.
func dirState(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, _ := os.Stat(p)
		b, _ := os.ReadFile(p)
		h := sha256.Sum256(b)
		lines = append(lines, e.Name()+" "+fi.Mode().String()+" "+hex.EncodeToString(h[:8]))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestCloneFull(t *testing.T) {
	t.Parallel()
	m := cloneManager(t)
	ctx := context.Background()
	src := cloneSource(t, m, "web")
	before := dirState(t, m.layout().VMStateDir(src.Metadata.UID))
	c, err := m.Clone(ctx, "web", "web-2", CloneOptions{})
	if err != nil {
		t.Fatalf("Clone: %v", err)
	}
	if after := dirState(t, m.layout().VMStateDir(src.Metadata.UID)); after != before {
		t.Errorf("source's directory after a full clone:\n%s\nwant as before:\n%s", after, before)
	}
	checkCloneIdentity(t, m, src, c)
	for _, d := range src.Spec.Disks {
		p := m.diskPath(c.Metadata.UID, d.Name)
		if b := backingOf(t, m, p); b != "" {
			t.Errorf("full clone disk %q: backed by %s; want a standalone copy", d.Name, b)
		}
		if out, err := exec.Command("qemu-img", "compare", "-q", m.diskPath(src.Metadata.UID, d.Name), p).CombinedOutput(); err != nil {
			t.Errorf("disk %q: the copy differs from the source: %v %s", d.Name, err, out)
		}
		cloneImgCheck(t, p)
	}
	noSharedWritable(t, m, src, c)
	if _, err := os.Stat(m.cloneRecordPath(c.Metadata.UID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a full clone reads no layer of its source; got a clone record (%v)", err)
	}
	// the source can go: nothing of it is the clone's
	if err := m.Delete(ctx, "web", false); err != nil {
		t.Errorf("Delete of a full clone's source: %v", err)
	}
	if !readsPattern(t, m.diskPath(c.Metadata.UID, "root"), 0x41, "0", "1M") {
		t.Error("the clone's root disk lost the source's data")
	}
}

// checkCloneIdentity: a new UID, new MACs, the user labels only, a seed
// with the clone's instance-id, its own NVRAM, stored and stopped.
func checkCloneIdentity(t *testing.T, m *Manager, src, c *VirtualMachine) {
	t.Helper()
	if c.Metadata.UID == src.Metadata.UID || !uidRE.MatchString(c.Metadata.UID) {
		t.Errorf("clone uid %q; want a new UUID (source %s)", c.Metadata.UID, src.Metadata.UID)
	}
	stored, err := m.store.load(c.Metadata.UID)
	if err != nil {
		t.Fatalf("the clone is not stored: %v", err)
	}
	if stored.Spec.Running || stored.Metadata.Generation != 1 {
		t.Errorf("clone: running %v, generation %d; want stopped at 1", stored.Spec.Running, stored.Metadata.Generation)
	}
	for i, n := range stored.Spec.Network {
		if want := MACFor(c.Metadata.UID, i); n.MAC != want || n.MAC == src.Spec.Network[i].MAC {
			t.Errorf("clone nic %d: mac %s; want %s (source %s)", i, n.MAC, want, src.Spec.Network[i].MAC)
		}
	}
	if len(stored.Metadata.Labels) != 1 || stored.Metadata.Labels["team"] != "web" {
		t.Errorf("clone labels %v; want only team=web (no %s)", stored.Metadata.Labels, LabelDirectorGeneration)
	}
	if src.Metadata.Labels[LabelDirectorGeneration] == "" {
		t.Fatal("the source has no director generation label: the test proves nothing")
	}
	seed, err := os.ReadFile(filepath.Join(m.layout().VMStateDir(c.Metadata.UID), "seed.iso"))
	if err != nil {
		t.Fatalf("clone seed: %v", err)
	}
	if !bytes.Contains(seed, []byte("instance-id: "+c.Metadata.UID)) || bytes.Contains(seed, []byte(src.Metadata.UID)) {
		t.Error("the clone's seed does not carry the clone's UID as instance-id (or carries the source's)")
	}
	vars, err := os.ReadFile(filepath.Join(m.layout().VMStateDir(c.Metadata.UID), "OVMF_VARS.fd"))
	if err != nil || string(vars) != "nvram of the source" {
		t.Errorf("clone NVRAM: %q, %v; want a copy of the source's", vars, err)
	}
}

func TestCloneLinked(t *testing.T) {
	t.Parallel()
	m := cloneManager(t)
	ctx := context.Background()
	src := cloneSource(t, m, "web")
	suid := src.Metadata.UID
	c, err := m.Clone(ctx, "web", "web-2", CloneOptions{Linked: true})
	if err != nil {
		t.Fatalf("Clone: %v", err)
	}
	checkCloneIdentity(t, m, src, c)
	for _, d := range src.Spec.Disks {
		frozen := m.frozenLayerPath(suid, d.Name, c.Metadata.UID[:8])
		fi, err := os.Stat(frozen)
		if err != nil || fi.Mode().Perm() != 0o444 {
			t.Fatalf("frozen layer %s: %v %v; want it 0444", frozen, fi, err)
		}
		sp, cp := m.diskPath(suid, d.Name), m.diskPath(c.Metadata.UID, d.Name)
		if b := backingOf(t, m, sp); b != frozen {
			t.Errorf("source disk %q backed by %q; want the frozen layer %s", d.Name, b, frozen)
		}
		if b := backingOf(t, m, cp); b != frozen {
			t.Errorf("clone disk %q backed by %q; want the frozen layer %s", d.Name, b, frozen)
		}
		for _, p := range []string{sp, cp, frozen} {
			cloneImgCheck(t, p)
		}
	}
	noSharedWritable(t, m, src, c)
	// the clone reads the source's data; writes on either side stay there
	if !readsPattern(t, m.diskPath(c.Metadata.UID, "root"), 0x41, "0", "1M") || !readsPattern(t, m.diskPath(c.Metadata.UID, "data"), 0x42, "1M", "1M") {
		t.Fatal("the linked clone does not read the source's data")
	}
	cloneIO(t, m.diskPath(c.Metadata.UID, "root"), "write -P 0x63 0 64k")
	cloneIO(t, m.diskPath(suid, "root"), "write -P 0x73 64k 64k")
	if !readsPattern(t, m.diskPath(suid, "root"), 0x41, "0", "64k") {
		t.Error("a write to the clone's disk reached the source's")
	}
	if !readsPattern(t, m.diskPath(c.Metadata.UID, "root"), 0x41, "64k", "64k") {
		t.Error("a write to the source's disk reached the clone's")
	}
	// the source cannot be deleted under its clone, gc leaves the layers
	err = m.Delete(ctx, "web", true)
	var lce *LinkedClonesError
	if !errors.As(err, &lce) || !errors.Is(err, ErrHasLinkedClones) || len(lce.Clones) != 1 || lce.Clones[0] != "web-2" {
		t.Fatalf("Delete of a linked clone's source: %v; want LinkedClonesError naming web-2", err)
	}
	// a delete cut short after the spec went: the directory is no orphan
	spec := m.store.specPath(suid)
	saved, _ := os.ReadFile(spec)
	if err := os.Remove(spec); err != nil {
		t.Fatal(err)
	}
	orphans, err := m.GC(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range orphans {
		if strings.Contains(o.Path, suid) && strings.Contains(o.Path, "/lib/") {
			t.Errorf("gc lists the frozen layers' directory as an orphan: %+v", o)
		}
	}
	if err := os.WriteFile(spec, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "web-2", false); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "web", false); err != nil {
		t.Errorf("Delete of the source once its clone is gone: %v", err)
	}
}

// A linked clone of a linked clone reads both layers and holds both
// sources; a full clone of it is a flat copy with all of the data.
func TestCloneChains(t *testing.T) {
	t.Parallel()
	m := cloneManager(t)
	ctx := context.Background()
	a := cloneSource(t, m, "a")
	b, err := m.Clone(ctx, "a", "b", CloneOptions{Linked: true})
	if err != nil {
		t.Fatal(err)
	}
	cloneIO(t, m.diskPath(b.Metadata.UID, "root"), "write -P 0x62 1M 1M")
	c, err := m.Clone(ctx, "b", "c", CloneOptions{Linked: true})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := m.readCloneRecord(c.Metadata.UID)
	if err != nil || rec == nil || len(rec.Layers) != 4 {
		t.Fatalf("c's clone record: %+v, %v; want 4 layers (b's and a's, two disks)", rec, err)
	}
	for _, ref := range []string{"a", "b"} {
		if err := m.Delete(ctx, ref, false); !errors.Is(err, ErrHasLinkedClones) {
			t.Errorf("Delete %s under c: %v; want ErrHasLinkedClones", ref, err)
		}
	}
	full, err := m.Clone(ctx, "c", "d", CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := m.diskPath(full.Metadata.UID, "root")
	if bf := backingOf(t, m, p); bf != "" {
		t.Errorf("full clone of a linked clone: backed by %s; want it flat", bf)
	}
	// 0x41 from a's disk, 0x62 from b's layer: both make it into the copy
	if !readsPattern(t, p, 0x41, "0", "1M") || !readsPattern(t, p, 0x62, "1M", "1M") {
		t.Error("the full clone of a linked clone lost data of the layers below it")
	}
	noSharedWritable(t, m, a, full)
	cloneImgCheck(t, p)
}

// A clone of an overlay on a base image stays backed by the base (the
// image store's, read-only) and copies only the overlay's data.
func TestCloneKeepsImageBase(t *testing.T) {
	t.Parallel()
	m := cloneManager(t)
	ctx := context.Background()
	raw := filepath.Join(t.TempDir(), "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", raw, "8M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	cloneIO(t, raw, "write -P 0x11 0 2M")
	if _, err := m.ImportImage(ctx, raw, "base"); err != nil {
		t.Fatal(err)
	}
	v := kernelVM("web", testKernel(t))
	v.Spec.Disks = []Disk{{Name: "root", Image: "base"}}
	src := mustCreate(t, m, v)
	cloneIO(t, m.diskPath(src.Metadata.UID, "root"), "write -P 0x22 1M 64k")
	c, err := m.Clone(ctx, "web", "web-2", CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := m.diskPath(c.Metadata.UID, "root")
	img, _ := m.image("base")
	if b := backingOf(t, m, p); b != img.Path {
		t.Errorf("clone backed by %q; want the base image %s", b, img.Path)
	}
	if !readsPattern(t, p, 0x11, "0", "1M") || !readsPattern(t, p, 0x22, "1M", "64k") {
		t.Error("the clone does not read the source's data")
	}
	// over a frozen layer (after a linked clone) the chain is
	// overlay, frozen, base: a full copy backed by the base would lose
	// the frozen layer's data (qemu-img 7.2's convert -B copies only the
	// top image's)
	if _, err := m.Clone(ctx, "web", "web-3", CloneOptions{Linked: true}); err != nil {
		t.Fatal(err)
	}
	f, err := m.Clone(ctx, "web", "web-4", CloneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p = m.diskPath(f.Metadata.UID, "root")
	if !readsPattern(t, p, 0x11, "0", "1M") || !readsPattern(t, p, 0x22, "1M", "64k") {
		t.Error("a full clone of a disk over a frozen layer lost data")
	}
	cloneImgCheck(t, p)
}

func TestCloneRefuses(t *testing.T) {
	t.Parallel()
	m := cloneManager(t)
	ctx := context.Background()
	cloneSource(t, m, "web")
	mustCreate(t, m, kernelVM("db", testKernel(t)))
	vmsDir := filepath.Join(m.layout().StateDir(), "vms")
	n := len(dirEntries(t, vmsDir))
	for _, tc := range []struct {
		src, name string
		o         CloneOptions
		is        error
		says      string
	}{
		{"web", "db", CloneOptions{}, ErrInvalid, `taken by VM`},
		{"web", "DB", CloneOptions{Linked: true}, ErrInvalid, `(got "DB")`},
		{"web", "web", CloneOptions{}, ErrInvalid, `(got "web")`},
		{"web", "no/slash", CloneOptions{}, ErrInvalid, `(got "no/slash")`},
		{"nope", "x", CloneOptions{}, ErrNotFound, `"nope"`},
	} {
		_, err := m.Clone(ctx, tc.src, tc.name, tc.o)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Clone(%q, %q): %v; want %v saying %s", tc.src, tc.name, err, tc.is, tc.says)
		}
	}
	if got := len(dirEntries(t, vmsDir)); got != n {
		t.Errorf("state dirs after refused clones: %d; want %d", got, n)
	}
}

// A clone that fails half way leaves nothing and the source as it was.
func TestCloneRevert(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		linked bool
	}{{"full", false}, {"linked", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := cloneManager(t)
			src := cloneSource(t, m, "web")
			sdir := m.layout().VMStateDir(src.Metadata.UID)
			// qemu-img fails on the second disk ("data") of the clone:
			// a copy to it, or its overlay outside the source's directory
			real := m.opts.QEMUImg
			wrapper := filepath.Join(t.TempDir(), "qemu-img")
			script := "#!/bin/sh\nlast=\"\"; for a in \"$@\"; do prev=\"$last\"; last=\"$a\"; done\n" +
				"case \"$1\" in convert) t=\"$last\";; create) t=\"$prev\";; *) t=\"\";; esac\n" +
				"case \"$t\" in " + sdir + "/*) ;; */disk-data.qcow2) echo injected failure >&2; exit 1;; esac\n" +
				"exec " + real + " \"$@\"\n"
			if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.linked {
				// a linked clone writes its overlays itself (createOverlay)
				// but leaves those it cannot lay out to qemu-img: the
				// data disk is made one, so that the wrapper fails it
				if out, err := exec.Command(real, "resize", "-q", m.diskPath(src.Metadata.UID, "data"), "5T").CombinedOutput(); err != nil {
					t.Fatalf("qemu-img resize: %v: %s", err, out)
				}
			}
			m.opts.QEMUImg = wrapper
			before := dirState(t, sdir)
			n := len(dirEntries(t, filepath.Join(m.layout().StateDir(), "vms")))
			_, err := m.Clone(context.Background(), "web", "web-2", CloneOptions{Linked: tc.linked})
			if err == nil || !strings.Contains(err.Error(), "injected failure") {
				t.Fatalf("Clone: %v; want the injected failure", err)
			}
			if after := dirState(t, sdir); after != before {
				t.Errorf("source after a failed clone:\n%s\nwant as before:\n%s", after, before)
			}
			if got := len(dirEntries(t, filepath.Join(m.layout().StateDir(), "vms"))); got != n {
				t.Errorf("state dirs after a failed clone: %d; want %d (the clone's removed)", got, n)
			}
			if _, err := m.store.find("web-2"); !errors.Is(err, ErrNotFound) {
				t.Errorf("the failed clone is stored: %v", err)
			}
			m.opts.QEMUImg = real
			for _, d := range src.Spec.Disks {
				cloneImgCheck(t, m.diskPath(src.Metadata.UID, d.Name))
				if b := backingOf(t, m, m.diskPath(src.Metadata.UID, d.Name)); b != "" {
					t.Errorf("source disk %q backed by %q after a failed clone; want as it was", d.Name, b)
				}
			}
		})
	}
}

// A second linked clone of a running source whose disk was hot-plugged:
// the first clone put the overlay ov-… on the disk's node disk-data,
// now a read-only frozen layer. The new overlay goes on the active node
// (node-name ov-…); one put on disk-data would sit below the layer the
// guest writes, and the new clone would be backed by a file its running
// source still writes.
func TestCloneLinkedRunningHotplugged(t *testing.T) {
	ctx := context.Background()
	m, v := snapshotManager(t)
	uid := v.Metadata.UID
	startFakeQEMU(t, m, m.opts.HostRoot, uid, nil)
	var txArgs string
	serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "query-block":
			return []map[string]any{
				{"device": "disk-root", "qdev": "/machine/peripheral/blk-root/virtio-backend", "inserted": map[string]any{"node-name": "#block1"}},
				{"device": "", "qdev": "/machine/peripheral/blk-data/virtio-backend", "inserted": map[string]any{"node-name": "ov-0123abcd-1"}},
			}
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		case "transaction":
			txArgs = string(args)
		}
		return nil
	}})
	if _, err := m.Clone(ctx, "snap", "snap-2", CloneOptions{Linked: true}); err != nil {
		t.Fatalf("Clone: %v", err)
	}
	if !strings.Contains(txArgs, `"device":"disk-root"`) || !strings.Contains(txArgs, `"node-name":"ov-0123abcd-1"`) || strings.Contains(txArgs, `"disk-data"`) {
		t.Errorf("transaction %s; want disk-root by its drive and data by its active node ov-0123abcd-1, not the frozen disk-data", txArgs)
	}
}

// A running source's UEFI variables are copied with its guest paused
// (stop drains QEMU's pflash writes), never while the firmware may be
// writing them.
func TestCloneRunningPausesForVars(t *testing.T) {
	ctx := context.Background()
	m, v := snapshotManager(t)
	uid := v.Metadata.UID
	startFakeQEMU(t, m, m.opts.HostRoot, uid, nil)
	vars := filepath.Join(m.layout().VMStateDir(uid), "OVMF_VARS.fd")
	if err := os.WriteFile(vars, []byte("vars"), 0o600); err != nil {
		t.Fatal(err)
	}
	var copied []bool // whether the clone's copy existed at each command
	var cloneVars string
	mon := serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, args json.RawMessage) any {
		if cloneVars == "" {
			if ms, _ := filepath.Glob(filepath.Join(m.layout().StateDir(), "vms", "*", "OVMF_VARS.fd")); len(ms) == 2 {
				for _, p := range ms {
					if p != vars {
						cloneVars = p
					}
				}
			}
		}
		copied = append(copied, cloneVars != "")
		switch cmd {
		case "query-block":
			return []map[string]any{
				{"device": "disk-root", "inserted": map[string]any{"node-name": "#block1"}},
				{"device": "disk-data", "inserted": map[string]any{"node-name": "#block2"}},
			}
		case "query-status":
			return map[string]any{"status": "running", "running": true}
		}
		return nil
	}})
	if _, err := m.Clone(ctx, "snap", "snap-2", CloneOptions{Linked: true}); err != nil {
		t.Fatalf("Clone: %v", err)
	}
	got := strings.Split(mon.gotString(), ",")
	stop, cont := slices.Index(got, "stop"), slices.Index(got, "cont")
	if stop < 0 || cont < stop || copied[stop] || !copied[cont] {
		t.Errorf("QMP commands %v (vars copied by each: %v); want stop, then the copy, then cont", got, copied)
	}
	if b, err := os.ReadFile(cloneVars); err != nil || string(b) != "vars" {
		t.Errorf("clone's OVMF_VARS.fd = %q, %v; want the source's", b, err)
	}
}
