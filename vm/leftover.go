package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/qmp"
)

// What a virt killed during a full clone of a running source leaves in
// the source's QEMU: the backup jobs (job-id clone-<id>-<n>) and their
// target nodes (node-name clone-<id>-<n>, the clone's files open for
// writing). Nothing else ends them: the job runs on to its end and stays
// concluded, the node stays open (a gc that removed the clone's
// directory would leave QEMU writing a deleted file).
//
// Clone records that it starts them (cloneJobsName in the source's run
// directory, written before the first blockdev-add, removed once they are
// gone); the first QMP session under the next hold of the source's lock
// finds the record and cancels what is left: under that lock no clone of
// another virt can be running, and one of this process only starts after
// that session. gc does the same for every running VM whose lock it can
// take, record or not.

// cloneJobPrefix begins the job-ids and node-names of a full clone's
// backup (backupDisks).
const cloneJobPrefix = "clone-"

// cloneJobsName records in a VM's run directory that a clone's backup
// jobs may be in its QEMU; cloneJobsErrName says why what was left could
// not be cancelled (vm show says it).
const (
	cloneJobsName    = "clone-jobs.json"
	cloneJobsErrName = "clone-jobs.err"
)

// heldLocks are the VM locks this process holds, each with the once of
// its sweep.
type heldLocks struct {
	mu sync.Mutex
	m  map[string]*lockHold
}

type lockHold struct{ sweep sync.Once }

// add records l, uid's lock, until it is released.
func (h *heldLocks) add(uid string, l *flock.Lock) {
	if h == nil {
		return
	}
	hold := &lockHold{}
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*lockHold{}
	}
	h.m[uid] = hold
	h.mu.Unlock()
	l.OnRelease(func() {
		h.mu.Lock()
		if h.m[uid] == hold {
			delete(h.m, uid)
		}
		h.mu.Unlock()
	})
}

// get is the hold of uid's lock by this process; nil when it holds none.
func (h *heldLocks) get(uid string) *lockHold {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[uid]
}

// cloneJobsRecord is cloneJobsName: which clone started jobs, and when.
type cloneJobsRecord struct {
	Clone     string    `json:"clone"` // the clone's UID
	StartedAt time.Time `json:"startedAt"`
	PID       int       `json:"pid"` // the virt that started them
}

// recordCloneJobs writes the record before the jobs exist: a kill at any
// point after leaves it.
func (m *Manager) recordCloneJobs(uid, cloneUID string) error {
	b, err := json.Marshal(cloneJobsRecord{Clone: cloneUID, StartedAt: time.Now().UTC(), PID: os.Getpid()})
	if err != nil {
		return err
	}
	return atomicfile.Write(m.runPath(uid, cloneJobsName), append(b, '\n'), 0o600)
}

// sweepLeftovers cancels what an interrupted clone left in uid's QEMU,
// and undoes an interrupted save, on the first QMP session of a hold of
// its lock when a clone recorded jobs or a save its start (cheap
// otherwise: two stats). Its failure is no failure of the command
// that opened the session: it is logged, and vm show says it.
// needsSweep reports whether a session of uid's QEMU may have a sweep to
// do: this process holds its lock, and a clone or a save recorded work
// (the sweep itself runs once per hold).
func (m *Manager) needsSweep(uid string) bool {
	if m.store.held.get(uid) == nil {
		return false
	}
	for _, name := range []string{cloneJobsName, saveRunName} {
		if _, err := os.Stat(m.runPath(uid, name)); err == nil {
			return true
		}
	}
	return false
}

func (m *Manager) sweepLeftovers(ctx context.Context, mon *qmp.Monitor, uid string) {
	h := m.store.held.get(uid)
	if h == nil {
		return // not under this process's lock: whoever holds it may own the jobs
	}
	h.sweep.Do(func() {
		if err := m.undoInterruptedSave(ctx, mon, uid); err != nil {
			m.log.Warn("a save an interrupted virt left half done was not undone", "vm", uid, "err", err)
		}
		if _, err := os.Stat(m.runPath(uid, cloneJobsName)); err != nil {
			return
		}
		m.cancelLeftovers(ctx, mon, uid)
	})
}

// cancelLeftovers cancels every clone job and node in uid's QEMU, which
// the caller has proven no live virt owns, and records the outcome.
func (m *Manager) cancelLeftovers(ctx context.Context, mon *qmp.Monitor, uid string) []string {
	done, err := cancelCloneJobs(ctx, mon, cloneJobPrefix)
	if err != nil {
		m.log.Warn("leftovers of an interrupted clone could not be cancelled", "vm", uid, "done", done, "err", err)
		msg := fmt.Sprintf("%s: %v\n", time.Now().UTC().Format(time.RFC3339), err)
		if werr := atomicfile.Write(m.runPath(uid, cloneJobsErrName), []byte(msg), 0o600); werr != nil {
			m.log.Warn("cannot record the failure", "vm", uid, "err", werr)
		}
		return done
	}
	if len(done) > 0 {
		m.log.Warn("cancelled what an interrupted clone left in the VM's QEMU", "vm", uid, "removed", strings.Join(done, ", "))
	}
	os.Remove(m.runPath(uid, cloneJobsErrName))
	os.Remove(m.runPath(uid, cloneJobsName))
	return done
}

// leftoverNote is what vm show says of a failed sweep; "" when none.
func (m *Manager) leftoverNote(uid string) string {
	b, err := os.ReadFile(m.runPath(uid, cloneJobsErrName))
	if err != nil {
		return ""
	}
	return "a backup job or node left by an interrupted clone could not be cancelled (" + strings.TrimSpace(string(b)) + "); run virt vm gc, or stop the VM"
}

// findCloneJobs lists the jobs and block nodes in mon's QEMU whose ids
// begin with prefix.
func findCloneJobs(ctx context.Context, mon *qmp.Monitor, prefix string) (jobs []qmpJob, nodes []string, err error) {
	var all []qmpJob
	if err := mon.Execute(ctx, "query-jobs", nil, &all); err != nil {
		return nil, nil, fmt.Errorf("QMP query-jobs: %w", err)
	}
	for _, j := range all {
		if strings.HasPrefix(j.ID, prefix) {
			jobs = append(jobs, j)
		}
	}
	var named []struct {
		NodeName string `json:"node-name"`
	}
	if err := mon.Execute(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &named); err != nil {
		return jobs, nil, fmt.Errorf("QMP query-named-block-nodes: %w", err)
	}
	for _, n := range named {
		if strings.HasPrefix(n.NodeName, prefix) && !slices.Contains(nodes, n.NodeName) {
			nodes = append(nodes, n.NodeName)
		}
	}
	return jobs, nodes, nil
}

// cancelCloneJobs cancels the jobs whose ids begin with prefix, waits for
// each to conclude and dismisses it, then deletes the nodes with such
// names (a backup's target is in use until its job is gone). It returns
// what it removed ("job ID", "node NAME").
func cancelCloneJobs(ctx context.Context, mon *qmp.Monitor, prefix string) ([]string, error) {
	var done []string
	cancelled := map[string]bool{}
	for {
		jobs, _, err := findCloneJobs(ctx, mon, prefix)
		if err != nil {
			return done, err
		}
		waiting := false
		for _, j := range jobs {
			switch j.Status {
			case "concluded":
				if err := mon.Execute(ctx, "job-dismiss", map[string]any{"id": j.ID}, nil); err != nil {
					return done, fmt.Errorf("QMP job-dismiss %s: %w", j.ID, err)
				}
				done = append(done, "job "+j.ID)
			case "null":
			case "created", "running", "paused", "ready", "standby":
				if !cancelled[j.ID] {
					if err := mon.Execute(ctx, "job-cancel", map[string]any{"id": j.ID}, nil); err != nil {
						return done, fmt.Errorf("QMP job-cancel %s: %w", j.ID, err)
					}
					cancelled[j.ID] = true
				}
				waiting = true
			default: // waiting, pending, aborting: on its way to concluded
				waiting = true
			}
		}
		if !waiting {
			break
		}
		select {
		case <-ctx.Done():
			return done, fmt.Errorf("waiting for cancelled jobs to end: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, nodes, err := findCloneJobs(ctx, mon, prefix)
	if err != nil {
		return done, err
	}
	var errs []error
	for _, n := range nodes {
		if err := mon.Execute(ctx, "blockdev-del", map[string]any{"node-name": n}, nil); err != nil {
			errs = append(errs, fmt.Errorf("QMP blockdev-del %s: %w", n, err))
			continue
		}
		done = append(done, "node "+n)
	}
	return done, errors.Join(errs...)
}

// leftoverWork is gc's part of the sweeps, for every VM whose lock is
// free (taken here, one try: no virt works on it, so no clone of one owns
// what is found): the clone jobs and nodes in a running VM's QEMU, and
// the files cut-short linked clones left in its directory (linkleft.go),
// listed (dryRun) or cancelled, removed and repaired. A VM whose lock is
// held is left to the command that holds it (it sweeps too).
func (m *Manager) leftoverWork(ctx context.Context, vms []*VirtualMachine, live map[string]qemuProcess, dryRun bool) ([]Orphan, error) {
	var out []Orphan
	var errs []error
	for _, vm := range vms {
		uid, name := vm.Metadata.UID, vm.Metadata.Name
		p, running := live[uid]
		lv, fz := m.linkCandidates(uid)
		links := len(lv)+len(fz) > 0
		if !running && !links {
			continue
		}
		if st, err := m.proc.state(p.PID); running && err == nil && st == "T" {
			continue // SIGSTOPped: its QMP would not answer
		}
		once, cancel := context.WithCancel(ctx)
		cancel() // one try, no wait
		l, err := m.store.lockVM(once, uid)
		if err != nil {
			m.log.Debug("gc: the VM is locked; its own command sweeps it", "vm", name)
			continue
		}
		found, err := m.leftoverWorkOf(ctx, vm, running, links, dryRun)
		l.Release()
		out = append(out, found...)
		if err != nil {
			errs = append(errs, fmt.Errorf("vm %q: %w", name, err))
		}
	}
	return out, errors.Join(errs...)
}

func (m *Manager) leftoverWorkOf(ctx context.Context, vm *VirtualMachine, running, links, dryRun bool) ([]Orphan, error) {
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []Orphan
	var q *liveChains
	if running {
		mon, err := m.dialQMPOnly(ctx, uid)
		if err != nil {
			if _, serr := os.Stat(m.runPath(uid, cloneJobsName)); serr != nil && !links {
				// no clone recorded jobs in it: nothing is known to be left
				m.log.Debug("gc: QMP does not answer; no clone recorded jobs in this QEMU", "vm", name, "err", err)
				return nil, nil
			}
			return nil, fmt.Errorf("a clone left work in its QEMU or files in its directory, and its QEMU cannot be asked (QMP: %w)", err)
		}
		defer mon.Close()
		jobs, err := m.qemuWorkOf(ctx, mon, uid, name, dryRun)
		out = append(out, jobs...)
		if err != nil {
			return out, err
		}
		if links {
			if q, err = readLiveChains(ctx, mon, vm.Spec.Disks); err != nil {
				return out, err
			}
		}
	}
	if !links {
		return out, nil
	}
	found, err := m.linkLeftovers(ctx, vm, q, !dryRun)
	for _, l := range found {
		out = append(out, Orphan{UID: uid, What: l.what + " (vm " + name + ")", Path: l.path, Kept: l.kept, Fix: l.fix, done: !dryRun})
	}
	return out, err
}

// qemuWorkOf lists (dryRun) or cancels the clone jobs and nodes in uid's
// QEMU.
func (m *Manager) qemuWorkOf(ctx context.Context, mon *qmp.Monitor, uid, name string, dryRun bool) ([]Orphan, error) {
	orphan := func(kind, id string) Orphan {
		what := "backup job left by an interrupted clone in the QEMU of vm " + name
		if kind == "node" {
			what = "backup target (the clone's file, open) left by an interrupted clone in the QEMU of vm " + name
		}
		return Orphan{UID: uid, What: what, Path: qemuWorkPrefix + uid + "/" + kind + "/" + id}
	}
	var out []Orphan
	if dryRun {
		jobs, nodes, err := findCloneJobs(ctx, mon, cloneJobPrefix)
		for _, j := range jobs {
			out = append(out, orphan("job", j.ID))
		}
		for _, n := range nodes {
			out = append(out, orphan("node", n))
		}
		return out, err
	}
	done := m.cancelLeftovers(ctx, mon, uid)
	for _, d := range done {
		kind, id, _ := strings.Cut(d, " ")
		out = append(out, orphan(kind, id))
	}
	if note := m.leftoverNote(uid); note != "" {
		return out, errors.New(note)
	}
	return out, nil
}

// keepOpenFiles marks the orphans a QEMU holds open (any QEMU on the
// host: a VM's, or one whose spec is gone): gc must never remove a file
// under a running QEMU, which would go on writing it deleted.
func (m *Manager) keepOpenFiles(out []Orphan) {
	type holder struct {
		pid  int
		file string
	}
	var held []holder
	for _, p := range m.proc.scanAllQEMU() {
		for _, f := range m.proc.openFiles(p.PID) {
			held = append(held, holder{p.PID, f})
		}
	}
	for i := range out {
		p := out[i].Path
		if out[i].InQEMU() || strings.HasPrefix(p, tapPrefix) {
			continue
		}
		// /proc/PID/fd names files by their resolved paths: a state
		// directory under a symlink must still match
		real := resolved(p)
		for _, h := range held {
			if h.file == p || h.file == real || strings.HasPrefix(h.file, p+string(os.PathSeparator)) || strings.HasPrefix(h.file, real+string(os.PathSeparator)) {
				out[i].Kept = fmt.Sprintf("open by QEMU pid %d (%s)", h.pid, h.file)
				break
			}
		}
	}
}
