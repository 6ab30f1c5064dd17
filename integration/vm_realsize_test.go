//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/qmp"
	"github.com/virtcon/virtcon/vm"
)

// The real-size tier (issue 21): the day-2 operations on a guest of the
// size users run, 1 GiB of RAM of which about 770 MiB is dirty and a disk
// with 1 GiB of written data, where the 256 MiB test guest with empty disks
// hides every defect that a QEMU needing more than a few seconds shows.
// One big guest is shared by the cases, in order, to keep the tier's time
// down under TCG.

const (
	realMemory = "1G"
	// realDirtyMiB is what the guest's tmpfs holds: 64 MiB from urandom,
	// copied 12 times (cat is ~5x faster than urandom under TCG; QEMU
	// skips zero pages but not repeated ones).
	realDirtyMiB = 768
	// realDataPattern is the byte the host writes over the disk's first
	// GiB before the first start ('Z'): the guest reads it back at
	// realDataOffsetMiB.
	realDataPattern   = 0x5a
	realDataOffsetMiB = 700
	realMarker        = "M7" // sector 0 of /dev/vda, written by the guest
)

// bigVM is a real-size guest: its root, name and uid, and how much of
// its RAM prepare filled.
type bigVM struct {
	root, name, uid string
	dirtyMiB        int
}

func (b *bigVM) dir() string { return paths.New(b.root).VMStateDir(b.uid) }

// realSizeCmdline is the guests' kernel command line: no_timer_check
// skips the kernel's check of the IO-APIC timer, which a TCG guest on a
// loaded host fails ("IO-APIC + timer doesn't work!", a panic at boot).
const realSizeCmdline = "console=ttyS0 quiet no_timer_check"

// realSizeGuest creates name (newRealSizeVM, with data), starts it and
// prepares it with dirtyMiB of dirty RAM.
func realSizeGuest(t *testing.T, root, name string, dirtyMiB int) *bigVM {
	t.Helper()
	b := newRealSizeVM(t, root, name, true)
	v(t, root, "vm", "start", name)
	b.prepare(t, dirtyMiB)
	return b
}

// newRealSizeVM creates the stopped VM name with 1 GiB of RAM and, with
// data, a 2 GiB disk whose first GiB the host fills with realDataPattern
// (qemu-io: far faster than the guest); else an empty 64 MiB disk.
func newRealSizeVM(t *testing.T, root, name string, data bool) *bigVM {
	t.Helper()
	g := requireGuest(t)
	requireQemuIO(t)
	size := "64M"
	if data {
		size = "2G"
	}
	var e vm.Entry
	out := v(t, root, "vm", "create", name, "--kernel", g.kernel, "--initrd", g.initrd, "--memory", realMemory, "--disk", size,
		"--cmdline", realSizeCmdline, "-o", "json")
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	b := &bigVM{root: root, name: name, uid: e.UID}
	if !data {
		return b
	}
	disk := filepath.Join(b.dir(), "disk-root.qcow2")
	start := time.Now()
	if o, err := exec.Command("qemu-io", "-f", "qcow2", "-c", fmt.Sprintf("write -P 0x%x 0 1G", realDataPattern), disk).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io write: %v\n%s", err, o)
	}
	t.Logf("%s: 1 GiB written to its disk in %v", name, time.Since(start).Round(time.Millisecond))
	return b
}

// prepare waits for the freshly booted guest, fills dirtyMiB of its RAM,
// starts its console counter and writes its disk marker.
func (b *bigVM) prepare(t *testing.T, dirtyMiB int) {
	t.Helper()
	root, name := b.root, b.name
	b.dirtyMiB = dirtyMiB
	waitLog(t, root, b.uid, "VIRTCON-GUEST-READY", 90*time.Second)
	start := time.Now()
	fill := fmt.Sprintf(`mount -o remount,size=%dm /dev/shm && dd if=/dev/urandom of=/dev/shm/u bs=1M count=64 2>/dev/null && for i in $(seq %d); do cat /dev/shm/u; done >/dev/shm/f && rm /dev/shm/u && echo "FILL""ED=$(($(stat -c %%s /dev/shm/f)>>20))"`,
		dirtyMiB+64+32, dirtyMiB/64)
	out, err := consoleSession(root, name, fill, "FILLED=", 120*time.Second)
	if err != nil || !strings.Contains(out, fmt.Sprintf("FILLED=%d", dirtyMiB)) {
		t.Fatalf("filling %d MiB of the guest's RAM: %v; console %q", dirtyMiB, err, out)
	}
	t.Logf("%s: %d MiB of its RAM filled in %v", name, dirtyMiB, time.Since(start).Round(time.Millisecond))
	guestSays(t, root, name, `(i=0; while :; do i=$((i+1)); echo "CNT=$i" >$VIRTCON_TTY; sleep 1; done) & echo LOOP-$((40+2))`, "LOOP-42")
	waitCounter(t, root, b.uid, 2)
	writeMarker(t, root, name, realMarker)
}

// ensureRunning brings the guest back when an earlier case (failing) left
// it stopped, saved or paused, so that each case tests its own operation.
func (b *bigVM) ensureRunning(t *testing.T) {
	t.Helper()
	e := entry(t, b.root, b.name)
	boots := strings.Count(serialLog(b.root, b.uid), "VIRTCON-GUEST-READY")
	switch e.Phase {
	case vm.PhaseRunning:
		return
	case vm.PhasePaused:
		t.Logf("the case before left %s Paused: resuming it", b.name)
		v(t, b.root, "vm", "resume", b.name)
		return
	case vm.PhaseSaved:
		t.Logf("the case before left %s Saved: resuming it", b.name)
		if r := virt(t, nil, "--root", b.root, "vm", "start", b.name); r.code == 0 {
			return
		}
		v(t, b.root, "vm", "start", b.name, "--discard-saved")
	default:
		t.Logf("the case before left %s %s: booting it again", b.name, e.Phase)
		if e.PID > 0 {
			v(t, b.root, "vm", "kill", b.name)
		}
		v(t, b.root, "vm", "start", b.name)
	}
	// a fresh boot: its RAM, counter and marker are to be made again
	for deadline := time.Now().Add(90 * time.Second); strings.Count(serialLog(b.root, b.uid), "VIRTCON-GUEST-READY") <= boots; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not boot again", b.name)
		}
	}
	b.prepare(t, b.dirtyMiB)
}

// requireQemuIO skips without qemu-io (qemu-utils).
func requireQemuIO(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-io"); err != nil {
		t.Skip("qemu-io missing: apt-get install qemu-utils")
	}
}

// lastCounter is the last CNT=n of the VM's console, 0 before any.
func (b *bigVM) lastCounter() int {
	c := snapCounters(serialLog(b.root, b.uid))
	if len(c) == 0 {
		return 0
	}
	return c[len(c)-1]
}

// countersSince waits until the console printed at least n counters
// after the log offset from and returns them; fewer when it gave up.
func (b *bigVM) countersSince(from, n int, timeout time.Duration) []int {
	var c []int
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if log := serialLog(b.root, b.uid); len(log) > from {
			if c = snapCounters(log[from:]); len(c) >= n {
				break
			}
		}
	}
	return c
}

// wantGoesOn checks that the guest's counter goes on after the log offset
// from, and from no later than atMost+1 when atMost > 0 (a restore to a
// state whose counter was at most atMost): lines printed just before the
// operation belong to the old run, so it looks for the drop.
func (b *bigVM) wantGoesOn(t *testing.T, what string, from, atMost int) {
	t.Helper()
	c := b.countersSince(from, 3, 120*time.Second)
	if len(c) < 3 {
		t.Fatalf("%s: the guest's counter did not go on (after it: %v); log since:\n%s", what, c, tail(serialLog(b.root, b.uid)[from:], 2000))
	}
	if atMost <= 0 {
		return
	}
	i := 0
	for i < len(c) && c[i] > atMost+1 {
		i++
	}
	if i == len(c) {
		t.Fatalf("%s: the counter after it %v never drops back to <= %d: not resumed from the saved state", what, c, atMost+1)
	}
	if strings.Contains(serialLog(b.root, b.uid)[from:], "VIRTCON-GUEST-READY") {
		t.Errorf("%s: the guest booted afresh instead of resuming", what)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// wantGuestData checks the guest's own view of its disk: the marker in
// sector 0 and the host-written pattern at realDataOffsetMiB.
func (b *bigVM) wantGuestData(t *testing.T, what string) {
	t.Helper()
	if got := readMarker(t, b.root, b.name); got != realMarker {
		t.Errorf("%s: the guest's disk marker reads %q; want %s", what, got, realMarker)
	}
	out := guestSays(t, b.root, b.name, fmt.Sprintf(`echo "DA""TA=[$(dd if=/dev/vda bs=1M skip=%d count=1 2>/dev/null | head -c 8)]"`, realDataOffsetMiB), "DATA=[")
	if want := "DATA=[" + strings.Repeat(string(rune(realDataPattern)), 8) + "]"; !strings.Contains(out, want) {
		t.Errorf("%s: the guest reads %q at %d MiB; want %s", what, out, realDataOffsetMiB, want)
	}
}

// qcow2Files lists the qcow2 files in the VM's state directory.
func (b *bigVM) qcow2Files(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(b.dir(), "*.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wantRunning checks vm show, vm list and the QEMU process agree that the
// VM runs.
func (b *bigVM) wantRunning(t *testing.T, what string) {
	t.Helper()
	r := virt(t, nil, "--root", b.root, "vm", "show", b.name, "-o", "json")
	var m vm.VirtualMachine
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil {
		t.Fatalf("%s: vm show: exit %d: %s", what, r.code, r.stderr)
	}
	e := entry(t, b.root, b.name)
	if e.Phase != vm.PhaseRunning || !alive(e.PID) || m.Status.Phase != vm.PhaseRunning {
		t.Errorf("%s: vm list %s (pid %d alive %v), vm show %s; want Running", what, e.Phase, e.PID, alive(e.PID), m.Status.Phase)
	}
}

// qemuFiles is every file some live QEMU under root holds open.
func qemuFiles(root string) map[string]int {
	out := map[string]int{}
	for _, pid := range qemuPIDsUnder(root) {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if p, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
				out[strings.TrimSuffix(p, " (deleted)")] = pid
			}
		}
	}
	return out
}

// gcDryRun runs vm gc --dry-run and checks it never offers for removal a
// file (or a directory holding one) that a live QEMU has open.
func gcDryRun(t *testing.T, root, what string) []vm.Orphan {
	t.Helper()
	var items []vm.Orphan
	r := virt(t, nil, "--root", root, "vm", "gc", "--dry-run", "-o", "json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &items) != nil {
		t.Fatalf("%s: vm gc --dry-run: exit %d: %s%s", what, r.code, r.stdout, r.stderr)
	}
	open := qemuFiles(root)
	for _, it := range items {
		if it.Kept != "" || it.InQEMU() {
			continue // listed as kept (held open), or a job/node gc cancels
		}
		for f, pid := range open {
			if f == it.Path || strings.HasPrefix(f, strings.TrimSuffix(it.Path, "/")+"/") {
				t.Errorf("%s: vm gc --dry-run offers %s (%s), but QEMU pid %d has %s open", what, it.Path, it.What, pid, f)
			}
		}
	}
	return items
}

// wantImagesClean runs qemu-img check on every qcow2 file of the VM.
func (b *bigVM) wantImagesClean(t *testing.T) {
	t.Helper()
	for _, f := range b.qcow2Files(t) {
		imgCheck(t, f, true)
	}
}

// qemuJobs lists the block jobs and jobs in the VM's QEMU and its named
// block nodes, over its QMP socket (free while no virt command runs).
func (b *bigVM) qemuJobs(t *testing.T) (jobs []string, nodes []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sock := filepath.Join(paths.New(b.root).VMRunDir(b.uid), "qmp.sock")
	mon, err := qmp.Dial(ctx, sock, qmp.Options{})
	if err != nil {
		t.Fatalf("QMP %s: %v", sock, err)
	}
	defer mon.Close()
	var js []struct {
		ID     string `json:"id"`
		Type   string `json:"type"`
		Status string `json:"status"`
	}
	if err := mon.Execute(ctx, "query-jobs", nil, &js); err != nil {
		t.Fatalf("query-jobs: %v", err)
	}
	for _, j := range js {
		jobs = append(jobs, fmt.Sprintf("%s %s (%s)", j.Type, j.ID, j.Status))
	}
	var ns []struct {
		NodeName string `json:"node-name"`
		File     string `json:"file"`
	}
	if err := mon.Execute(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &ns); err != nil {
		t.Fatalf("query-named-block-nodes: %v", err)
	}
	for _, n := range ns {
		nodes = append(nodes, n.NodeName+"="+n.File)
	}
	return jobs, nodes
}

// TestIntegrationRealSize runs the day-2 operations on one 1 GiB guest
// with ~770 MiB of dirty RAM and 1 GiB of disk data, in order; each
// checks that vm show, vm list, vm gc, qemu-img and the guest's own
// counter and disk marker agree after it.
func TestIntegrationRealSize(t *testing.T) {
	root := vmRoot(t)
	b := realSizeGuest(t, root, "big", realDirtyMiB)
	t.Run("MemorySnapshot", func(t *testing.T) { realMemorySnapshot(t, b) })
	t.Run("SaveResume", func(t *testing.T) { realSaveResume(t, b) })
	t.Run("Clone", func(t *testing.T) { realClones(t, b) })
	t.Run("KilledSnapshot", func(t *testing.T) { realKilledSnapshot(t, b) })
	t.Run("KilledClone", func(t *testing.T) { realKilledClone(t, b, false) })
	t.Run("KilledLinkedClone", func(t *testing.T) { realKilledClone(t, b, true) })
	t.Run("KilledSave", func(t *testing.T) { realKilledSave(t, b) })
}

// vm save of the big guest stops its QEMU with the state in a file; vm
// start resumes it where it was.
func realSaveResume(t *testing.T, b *bigVM) {
	b.ensureRunning(t)
	pid := entry(t, b.root, b.name).PID
	start := time.Now()
	r := virt(t, nil, "--root", b.root, "vm", "save", b.name)
	t.Logf("vm save of the 1 GiB guest: %v, exit %d: %s", time.Since(start).Round(time.Millisecond), r.code, strings.TrimSpace(r.stdout))
	if r.code != 0 {
		t.Fatalf("vm save: exit %d: %s", r.code, r.stderr)
	}
	n := b.lastCounter()
	if e := entry(t, b.root, b.name); e.Phase != vm.PhaseSaved || alive(pid) {
		t.Fatalf("after vm save: %s, QEMU alive %v; want Saved, QEMU gone", e.Phase, alive(pid))
	}
	if st, err := os.Stat(filepath.Join(b.dir(), "saved.state")); err != nil || st.Size() < int64(realDirtyMiB)<<20 {
		t.Errorf("saved.state: %v; want at least %d MiB", err, realDirtyMiB)
	}
	from := len(serialLog(b.root, b.uid))
	start = time.Now()
	r = virt(t, nil, "--root", b.root, "vm", "start", b.name)
	t.Logf("vm start (resume) of the saved 1 GiB guest: %v, exit %d", time.Since(start).Round(time.Millisecond), r.code)
	if r.code != 0 {
		t.Fatalf("vm start of the saved VM: exit %d: %s", r.code, r.stderr)
	}
	b.wantRunning(t, "after the resume")
	b.wantGoesOn(t, "the resume", from, n)
	b.wantGuestData(t, "after the resume")
}

// Full and linked clones of the running big guest: the clone holds the
// source's data, the source runs on, nothing is left for gc.
func realClones(t *testing.T, b *bigVM) {
	b.ensureRunning(t)
	for _, linked := range []bool{false, true} {
		name, args := "full1", []string{"vm", "clone", b.name, "full1", "-o", "json"}
		if linked {
			name, args = "linked1", append(args[:3:3], "linked1", "--linked", "-o", "json")
		}
		from := len(serialLog(b.root, b.uid))
		start := time.Now()
		r := virt(t, nil, append([]string{"--root", b.root}, args...)...)
		t.Logf("vm clone %s of the running 1 GiB guest: %v, exit %d", name, time.Since(start).Round(time.Millisecond), r.code)
		if r.code != 0 {
			t.Fatalf("vm clone %s: exit %d: %s", name, r.code, r.stderr)
		}
		var e vm.Entry
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
			t.Fatal(err)
		}
		wantCloneWhole(t, b.root, e.UID, name)
		b.wantRunning(t, "after clone "+name)
		b.wantGoesOn(t, "after clone "+name, from, 0)
		b.wantImagesClean(t)
		if items := gcDryRun(t, b.root, "after clone "+name); len(items) != 0 {
			t.Errorf("after clone %s: vm gc --dry-run offers %+v; want nothing", name, items)
		}
		b.wantNoJobs(t, "after clone "+name)
		if !linked {
			v(t, b.root, "vm", "delete", name)
		}
	}
	b.wantGuestData(t, "after the clones")
}

// wantCloneWhole checks a clone's disk holds the source's data: a clean
// image whose bytes at realDataOffsetMiB are the pattern.
func wantCloneWhole(t *testing.T, root, uid, name string) {
	t.Helper()
	disk := filepath.Join(paths.New(root).VMStateDir(uid), "disk-root.qcow2")
	imgCheck(t, disk, false)
	out, err := exec.Command("qemu-io", "-r", "-f", "qcow2", "-c", fmt.Sprintf("read -P 0x%x %dM 1M", realDataPattern, realDataOffsetMiB), disk).CombinedOutput()
	if err != nil || strings.Contains(string(out), "failed") {
		t.Errorf("clone %s: its disk at %d MiB: %v %s; want the source's pattern", name, realDataOffsetMiB, err, out)
	}
}

// wantNoJobs checks the source's QEMU has no job (but the ended ones a
// killed snapshot command leaves, logged) and no node on a file that is
// not the VM's own.
func (b *bigVM) wantNoJobs(t *testing.T, what string) {
	t.Helper()
	jobs, nodes := b.qemuJobs(t)
	for _, j := range jobs {
		if strings.HasPrefix(j, "snapshot-") && strings.HasSuffix(j, "(concluded)") {
			// a killed snapshot command's ended job, never dismissed: it
			// holds nothing (no node, no file), and ids are never reused
			t.Logf("%s: an ended job left in the source's QEMU: %s", what, j)
			continue
		}
		t.Errorf("%s: a job left in the source's QEMU: %s", what, j)
	}
	for _, n := range nodes {
		if _, file, _ := strings.Cut(n, "="); strings.HasSuffix(file, ".qcow2") && !strings.HasPrefix(file, b.dir()+"/") {
			t.Errorf("%s: the source's QEMU holds a node on another VM's file: %s", what, n)
		}
	}
}
