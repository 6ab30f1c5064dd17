package vm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// jobsMonitor is a QEMU monitor holding block jobs and named nodes, as
// query-jobs and query-named-block-nodes show them: a cancelled job is
// aborting for one query, then concluded until dismissed; a node in use
// by a job that is not dismissed refuses blockdev-del.
type jobsMonitor struct {
	mu    sync.Mutex
	jobs  map[string]string // id -> status
	nodes map[string]string // node-name -> the job using it ("" none)
	seen  []string          // job-cancel, job-dismiss and blockdev-del, with their ids
}

func newJobsMonitor(jobs map[string]string, nodes map[string]string) *jobsMonitor {
	return &jobsMonitor{jobs: jobs, nodes: nodes}
}

func (j *jobsMonitor) handle(cmd string, raw json.RawMessage) any {
	j.mu.Lock()
	defer j.mu.Unlock()
	var a struct {
		ID       string `json:"id"`
		NodeName string `json:"node-name"`
	}
	json.Unmarshal(raw, &a)
	switch cmd {
	case "query-jobs":
		var out []map[string]any
		for id, st := range j.jobs {
			out = append(out, map[string]any{"id": id, "type": "backup", "status": st, "current-progress": 1, "total-progress": 2})
			if st == "aborting" {
				j.jobs[id] = "concluded"
			}
		}
		if out == nil {
			return []any{}
		}
		return out
	case "query-named-block-nodes":
		var out []map[string]any
		for n := range j.nodes {
			out = append(out, map[string]any{"node-name": n, "drv": "qcow2", "file": "/x/" + n})
		}
		if out == nil {
			return []any{}
		}
		return out
	case "job-cancel":
		j.seen = append(j.seen, cmd+" "+a.ID)
		if j.jobs[a.ID] != "running" {
			return qmpFail{"GenericError", "job not running"}
		}
		j.jobs[a.ID] = "aborting"
	case "job-dismiss":
		j.seen = append(j.seen, cmd+" "+a.ID)
		if j.jobs[a.ID] != "concluded" {
			return qmpFail{"GenericError", "job not concluded"}
		}
		delete(j.jobs, a.ID)
	case "blockdev-del":
		j.seen = append(j.seen, cmd+" "+a.NodeName)
		if job := j.nodes[a.NodeName]; job != "" && j.jobs[job] != "" {
			return qmpFail{"GenericError", "Node " + a.NodeName + " is in use"}
		}
		delete(j.nodes, a.NodeName)
	}
	return nil
}

func (j *jobsMonitor) state() (jobs, nodes []string, seen string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for id := range j.jobs {
		jobs = append(jobs, id)
	}
	for n := range j.nodes {
		nodes = append(nodes, n)
	}
	return jobs, nodes, strings.Join(j.seen, ",")
}

// leftoverVM is a running (stand-in) VM whose QEMU holds what a killed
// full clone leaves: its backup job, running, and the job's target
// node, beside a job and a node that are not a clone's.
func leftoverVM(t *testing.T) (*Manager, string, *VirtualMachine, *jobsMonitor, *fakeMonitor) {
	t.Helper()
	m, _, host := newTestManager(t)
	v := mustCreate(t, m, kernelVM("src", testKernel(t)))
	startFakeQEMU(t, m, host, v.Metadata.UID, nil)
	j := newJobsMonitor(
		map[string]string{"clone-0123abcd-0": "running", "snap-1": "running"},
		map[string]string{"clone-0123abcd-0": "clone-0123abcd-0", "drive-root": ""})
	f := serveMonitor(t, m.runPath(v.Metadata.UID, qmpSockName), &fakeMonitor{handle: j.handle})
	return m, host, v, j, f
}

func TestCancelCloneJobs(t *testing.T) {
	t.Parallel()
	m, _, v, j, _ := leftoverVM(t)
	ctx := context.Background()
	mon, err := m.dialQMPOnly(ctx, v.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	done, err := cancelCloneJobs(ctx, mon, cloneJobPrefix)
	if err != nil {
		t.Fatalf("cancelCloneJobs: %v (done %v)", err, done)
	}
	jobs, nodes, seen := j.state()
	if want := "job-cancel clone-0123abcd-0,job-dismiss clone-0123abcd-0,blockdev-del clone-0123abcd-0"; seen != want {
		t.Errorf("QMP: got %s; want %s", seen, want)
	}
	if strings.Join(jobs, ",") != "snap-1" || strings.Join(nodes, ",") != "drive-root" {
		t.Errorf("left: jobs %v, nodes %v; want only snap-1 and drive-root (not a clone's)", jobs, nodes)
	}
	if got, want := strings.Join(done, ","), "job clone-0123abcd-0,node clone-0123abcd-0"; got != want {
		t.Errorf("done: got %s; want %s", got, want)
	}
}

// TestSweepUnderLock: the first QMP session of a command under the VM's
// lock cancels a killed clone's leftovers when a clone recorded jobs; a
// session without the lock (vm show, list) never does (the clone that
// owns them may be running), and says when a sweep failed.
func TestSweepUnderLock(t *testing.T) {
	t.Parallel()
	m, _, v, j, f := leftoverVM(t)
	ctx := context.Background()
	uid := v.Metadata.UID
	if err := m.recordCloneJobs(uid, "0123abcd-0000"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Get(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if _, _, seen := j.state(); seen != "" {
		t.Errorf("vm show (no lock) sent %s; want nothing cancelled", seen)
	}
	if err := m.Pause(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	jobs, nodes, seen := j.state()
	if !strings.Contains(seen, "job-cancel clone-0123abcd-0") || strings.Contains(seen, "snap-1") {
		t.Errorf("pause: QMP %s; want the clone's job cancelled, nothing else", seen)
	}
	if len(jobs) != 1 || len(nodes) != 1 {
		t.Errorf("after pause: jobs %v, nodes %v; want only the ones that are no clone's", jobs, nodes)
	}
	if got := f.got(); got[len(got)-1] != "stop" {
		t.Errorf("pause: QMP %v; want it to end with its own stop", got)
	}
	if _, err := os.Stat(m.runPath(uid, cloneJobsName)); !os.IsNotExist(err) {
		t.Errorf("record after the sweep: %v; want it removed", err)
	}
	// once swept, a session does not ask again
	n := len(f.got())
	if err := m.Resume(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if got := f.got()[n:]; strings.Join(got, ",") != "cont" {
		t.Errorf("resume: QMP %v; want only cont", got)
	}
}

// TestSweepFailureShown: a leftover that cannot be removed is said by vm
// show, and gc reports it.
func TestSweepFailureShown(t *testing.T) {
	t.Parallel()
	m, _, v, j, _ := leftoverVM(t)
	ctx := context.Background()
	uid := v.Metadata.UID
	j.nodes["clone-0123abcd-1"] = "snap-1" // held by a job that is not a clone's: blockdev-del fails
	if err := m.recordCloneJobs(uid, "0123abcd-0000"); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, "src"); err != nil {
		t.Fatalf("pause with a leftover that cannot be cancelled: %v; want the pause done", err)
	}
	_, e, err := m.Get(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.Message, "interrupted clone could not be cancelled") || !strings.Contains(e.Message, "clone-0123abcd-1") {
		t.Errorf("vm show message: %q; want the failed sweep named", e.Message)
	}
	if _, err := m.GC(ctx, false); err == nil || !strings.Contains(err.Error(), "clone-0123abcd-1") {
		t.Errorf("gc: %v; want the leftover it cannot cancel named", err)
	}
}

func TestGCCancelsCloneJobs(t *testing.T) {
	t.Parallel()
	m, _, v, j, _ := leftoverVM(t)
	ctx := context.Background()
	uid := v.Metadata.UID
	listed, err := m.GC(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range listed {
		if o.InQEMU() {
			got = append(got, o.Path)
		}
	}
	if want := "qemu:" + uid + "/job/clone-0123abcd-0,qemu:" + uid + "/node/clone-0123abcd-0"; strings.Join(got, ",") != want {
		t.Errorf("gc --dry-run: got %v; want %s", got, want)
	}
	if _, _, seen := j.state(); seen != "" {
		t.Errorf("gc --dry-run sent %s; want nothing changed", seen)
	}
	if _, err := m.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if jobs, nodes, _ := j.state(); len(jobs) != 1 || len(nodes) != 1 {
		t.Errorf("after gc: jobs %v, nodes %v; want the clone's gone", jobs, nodes)
	}
}

// TestGCKeepsFilesOpenByQEMU: a directory without a spec that a QEMU
// still writes (a killed clone's target) is listed as kept and stays.
func TestGCKeepsFilesOpenByQEMU(t *testing.T) {
	t.Parallel()
	f := newHostFixture(t)
	ctx := context.Background()
	disk := filepath.Join(f.orphanState, "disk-root.qcow2")
	fd := filepath.Join(f.host, "proc", "301", "fd")
	if err := os.MkdirAll(fd, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(disk+" (deleted)", filepath.Join(fd, "12")); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		out, err := f.m.GC(ctx, dry)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range out {
			if o.Path == f.orphanState {
				found = true
				if !strings.Contains(o.Kept, "open by QEMU pid 301") {
					t.Errorf("gc (dry %v): %s kept %q; want it kept, open by QEMU pid 301", dry, o.Path, o.Kept)
				}
			}
		}
		if !found {
			t.Errorf("gc (dry %v): %s not listed; want it listed as kept", dry, f.orphanState)
		}
		if _, err := os.Stat(disk); err != nil {
			t.Errorf("gc (dry %v): %v; want the open file kept", dry, err)
		}
	}
}

// TestSweepOnItsOwnBound: a QEMU slow to cancel a killed clone's job
// (busy with it) still gets the sweep done and the command's own work:
// the sweep ran on what was left of the command's exchange bound, so a
// cancel answered after it closed the monitor, and the pause failed.
func TestSweepOnItsOwnBound(t *testing.T) {
	t.Parallel()
	m, _, host := newTestManager(t)
	m.opts.QMPTimeout = 500 * time.Millisecond // the sweep's bound is ten of these
	v := mustCreate(t, m, kernelVM("src", testKernel(t)))
	startFakeQEMU(t, m, host, v.Metadata.UID, nil)
	j := newJobsMonitor(
		map[string]string{"clone-0123abcd-0": "running"},
		map[string]string{"clone-0123abcd-0": "clone-0123abcd-0"})
	f := serveMonitor(t, m.runPath(v.Metadata.UID, qmpSockName), &fakeMonitor{handle: func(cmd string, raw json.RawMessage) any {
		if cmd == "job-cancel" {
			time.Sleep(3 * m.opts.QMPTimeout) // QEMU busy: late, within the sweep's bound
		}
		return j.handle(cmd, raw)
	}})
	if err := m.recordCloneJobs(v.Metadata.UID, "0123abcd-0000"); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(context.Background(), "src"); err != nil {
		t.Fatalf("pause with a slow sweep: %v", err)
	}
	if jobs, nodes, seen := j.state(); len(jobs) != 0 || len(nodes) != 0 {
		t.Errorf("after the sweep: jobs %v, nodes %v (QMP %s); want none", jobs, nodes, seen)
	}
	if got := f.got(); got[len(got)-1] != "stop" {
		t.Errorf("pause: QMP %v; want it to end with its own stop", got)
	}
}

// TestGCKeepsFilesOpenByQEMUResolved: /proc/PID/fd names a file by its
// resolved path; a state directory reached through a symlink is still
// seen open (a review finding: the paths were compared as strings, and
// gc would have removed the directory of a clone QEMU still wrote).
func TestGCKeepsFilesOpenByQEMUResolved(t *testing.T) {
	t.Parallel()
	f := newHostFixture(t)
	ctx := context.Background()
	// the VMs' state directory lives elsewhere, reached by a symlink
	vms := filepath.Dir(f.orphanState)
	moved := filepath.Join(t.TempDir(), "vms")
	if err := os.Rename(vms, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, vms); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(moved, filepath.Base(f.orphanState))
	fd := filepath.Join(f.host, "proc", "301", "fd")
	if err := os.MkdirAll(fd, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(real, "disk-root.qcow2"), filepath.Join(fd, "12")); err != nil {
		t.Fatal(err)
	}
	out, err := f.m.GC(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range out {
		if o.Path == f.orphanState {
			found = true
			if !strings.Contains(o.Kept, "open by QEMU pid 301") {
				t.Errorf("gc: %s kept %q; want it kept, open by QEMU pid 301 (through the symlink)", o.Path, o.Kept)
			}
		}
	}
	if !found {
		t.Errorf("gc: %s not listed (%+v); want it listed as kept", f.orphanState, out)
	}
}
