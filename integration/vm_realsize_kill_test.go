//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// killPoint is a moment inside a virt command as seen from outside it,
// named for what is seen, not for what virt is assumed to be doing.
type killPoint struct {
	id      string // the subtest's name
	name    string
	reached func(pid int) bool
}

// runKilled starts virt --root root args, polls p every few milliseconds
// and kills virt with SIGKILL once p is reached. It fails the test when
// virt ended before p was seen: the case would then test nothing.
func runKilled(t *testing.T, root string, p killPoint, args ...string) {
	t.Helper()
	cmd := exec.Command(virtBin, append([]string{"--root", root}, args...)...)
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			t.Fatalf("virt %s ended (%v, %v) before %s was seen: stderr %q", strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond), p.name, stderr.String())
		case <-time.After(3 * time.Millisecond):
		}
		if p.reached(cmd.Process.Pid) {
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			t.Logf("virt %s killed -9 at %s, %v in", strings.Join(args, " "), p.name, time.Since(start).Round(time.Millisecond))
			return
		}
	}
}

// lockHeldBy says whether pid holds a flock on path (/proc/locks).
func lockHeldBy(path string, pid int) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	ino := strconv.FormatUint(st.Sys().(*syscall.Stat_t).Ino, 10)
	b, _ := os.ReadFile("/proc/locks")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[1] == "FLOCK" && f[4] == strconv.Itoa(pid) && strings.HasSuffix(f[5], ":"+ino) {
			return true
		}
	}
	return false
}

func (b *bigVM) lockPoint() killPoint {
	lock := filepath.Join(paths.New(b.root).RunDir(), "locks", "vm-"+b.uid+".lock")
	return killPoint{"before-lock-held", "the VM lock held (before the QEMU job)", func(pid int) bool { return lockHeldBy(lock, pid) }}
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return st.Size()
}

// vmDirs lists the VM state directories under root.
func vmDirs(root string) map[string]bool {
	ents, _ := os.ReadDir(filepath.Join(paths.New(root).StateDir(), "vms"))
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// A clone of the running big guest killed at three points: the source
// runs on with no job or foreign node left in its QEMU; the clone either
// is listed and whole, or gc lists what is left of it; gc never offers a
// file a QEMU holds; after vm gc nothing of it remains.
func realKilledClone(t *testing.T, b *bigVM, linked bool) {
	stateDir := filepath.Join(paths.New(b.root).StateDir(), "vms")
	var points []func() killPoint
	newDir := func(before map[string]bool, ok func(dir string) bool) func(int) bool {
		return func(int) bool {
			for d := range vmDirs(b.root) {
				if !before[d] && ok(filepath.Join(stateDir, d)) {
					return true
				}
			}
			return false
		}
	}
	if !linked {
		points = []func() killPoint{
			b.lockPoint,
			func() killPoint {
				before := vmDirs(b.root)
				return killPoint{"during-target-growing", "the copy's disk grown to 64 MiB (the backup job running)", newDir(before, func(d string) bool { return fileSize(filepath.Join(d, "disk-root.qcow2")) >= 64<<20 })}
			},
			func() killPoint {
				before := vmDirs(b.root)
				return killPoint{"after-target-full", "the copy's disk holding 1 GiB (the job's data copied; it may not have ended)", newDir(before, func(d string) bool { return fileSize(filepath.Join(d, "disk-root.qcow2")) >= 1<<30 })}
			},
		}
	} else {
		points = []func() killPoint{
			b.lockPoint,
			func() killPoint {
				before, _ := filepath.Glob(filepath.Join(b.dir(), "*.qcow2"))
				return killPoint{"during-layer-made", "a new layer file in the source's directory (the freeze under way)", func(int) bool {
					now, _ := filepath.Glob(filepath.Join(b.dir(), "*.qcow2"))
					return len(now) > len(before)
				}}
			},
			func() killPoint {
				before := vmDirs(b.root)
				return killPoint{"after-clone-recorded", "the clone's clone.json written (its files made)", newDir(before, func(d string) bool { return fileSize(filepath.Join(d, "clone.json")) > 0 })}
			},
		}
	}
	for i, mk := range points {
		name := fmt.Sprintf("kc%d", i)
		args := []string{"vm", "clone", b.name, name}
		if linked {
			name = fmt.Sprintf("kl%d", i)
			args = []string{"vm", "clone", b.name, name, "--linked"}
		}
		b.ensureRunning(t) // before mk: a point may read the running QEMU
		p := mk()
		t.Run(p.id, func(t *testing.T) {
			from := len(serialLog(b.root, b.uid))
			runKilled(t, b.root, p, args...)
			b.wantGoesOn(t, "after the kill", from, 0)
			b.wantRunning(t, "after the kill")
			vms := listVMs(t, b.root)
			items := gcDryRun(t, b.root, "after the kill")
			offered := map[string]bool{}
			for _, it := range items {
				offered[strings.TrimSuffix(it.Path, "/")] = true
			}
			if e, ok := vms[name]; ok {
				wantCloneWhole(t, b.root, e.UID, name)
			}
			// every state dir not a listed VM's is offered by gc
			uids := map[string]bool{}
			for _, e := range vms {
				uids[e.UID] = true
			}
			for d := range vmDirs(b.root) {
				if !uids[d] && !offered[filepath.Join(stateDir, d)] {
					t.Errorf("the state dir %s belongs to no listed VM and vm gc --dry-run does not offer it (it offers %+v)", d, items)
				}
			}
			// every file in the source's directory is in use by its QEMU
			// (by inode: live-* names are links), or offered by gc
			b.wantSourceFilesAccounted(t, offered, items)
			if r := virt(t, nil, "--root", b.root, "vm", "gc", "-o", "json"); r.code != 0 {
				t.Errorf("vm gc: exit %d: %s", r.code, r.stderr)
			}
			b.wantNoJobs(t, "after the kill and vm gc")
			for _, f := range b.qcow2Files(t) {
				if st, err := os.Stat(f); err == nil && strings.HasPrefix(filepath.Base(f), "frozen-") && st.Mode().Perm() != 0o444 {
					t.Errorf("after vm gc: frozen layer %s has mode %v; want 0444", filepath.Base(f), st.Mode().Perm())
				}
			}
			b.wantImagesClean(t)
			if _, ok := vms[name]; ok {
				v(t, b.root, "vm", "delete", name)
			}
			if items := gcDryRun(t, b.root, "after vm gc"); len(items) != 0 {
				t.Errorf("after vm gc, vm gc --dry-run still offers %+v", items)
			}
		})
	}
	b.ensureRunning(t)
	b.wantGuestData(t, "after the killed clones")
}

// wantSourceFilesAccounted checks each file in the source's directory is
// one its QEMU has open (the same inode), or one gc offers; a frozen layer
// is read-only (0444) or offered (to be fixed).
func (b *bigVM) wantSourceFilesAccounted(t *testing.T, offered map[string]bool, items []vm.Orphan) {
	t.Helper()
	// by the descriptor, not its path: a name QEMU opened may since name
	// another file (disk-root.qcow2 moves onto the new overlay)
	open := map[uint64]bool{}
	for _, pid := range qemuPIDsUnder(b.root) {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if st, err := os.Stat(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
				open[st.Sys().(*syscall.Stat_t).Ino] = true
			}
		}
	}
	for _, f := range b.qcow2Files(t) {
		st, err := os.Stat(f)
		if err != nil {
			continue
		}
		if strings.HasPrefix(filepath.Base(f), "frozen-") && st.Mode().Perm() != 0o444 && !offered[f] {
			t.Errorf("frozen layer %s has mode %v and vm gc --dry-run does not offer to fix it; want 0444", filepath.Base(f), st.Mode().Perm())
		}
		if !open[st.Sys().(*syscall.Stat_t).Ino] && !offered[f] && !b.layerOfClone(f) {
			ls, _ := exec.Command("ls", "-li", b.dir()).CombinedOutput()
			_, nodes := b.qemuJobs(t)
			t.Errorf("%s in the source's directory is neither open by its QEMU, a listed clone's layer, nor offered by vm gc --dry-run (%+v)\nthe directory:\n%s\nthe QEMU's nodes: %v", filepath.Base(f), items, ls, nodes)
		}
	}
}

// layerOfClone says whether f backs a listed VM's disk.
func (b *bigVM) layerOfClone(f string) bool {
	var entries []vm.Entry
	out, _ := exec.Command(virtBin, "--root", b.root, "vm", "list", "-o", "json").Output()
	json.Unmarshal(out, &entries)
	for _, e := range entries {
		if e.UID == "" || e.UID == b.uid {
			continue
		}
		info, _ := exec.Command("qemu-img", "info", "-U", "--backing-chain", "--output", "json", filepath.Join(b.root, "var/lib/virtcon/vms", e.UID, "disk-root.qcow2")).Output()
		if strings.Contains(string(info), `"`+f+`"`) {
			return true
		}
	}
	return false
}
