package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/vm"
)

func journalWith(t *testing.T, dir string, recs map[string]struct {
	phase directorv1.TaskPhase
	ended time.Time
}) *journal {
	t.Helper()
	j, err := openJournal(dir, testLog(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for id, r := range recs {
		if _, err := j.create(&jrecord{ID: id, Kind: KindStartVM, ReceivedAt: r.ended, EndedAt: r.ended},
			&directorv1.TaskStatus{TaskId: id, Seq: 1, Phase: r.phase}, r.ended); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

// Terminal records older than 7 days go (file and memory); young ones and
// unfinished ones of any age stay; a reopened journal agrees.
func TestJournalPrune(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tasks")
	now := time.Now()
	old, young, stuck := newID(), newID(), newID()
	j := journalWith(t, dir, map[string]struct {
		phase directorv1.TaskPhase
		ended time.Time
	}{
		old:   {directorv1.TaskPhase_TASK_PHASE_SUCCEEDED, now.Add(-8 * 24 * time.Hour)},
		young: {directorv1.TaskPhase_TASK_PHASE_FAILED, now.Add(-6 * 24 * time.Hour)},
		stuck: {directorv1.TaskPhase_TASK_PHASE_RUNNING, now.Add(-30 * 24 * time.Hour)},
	})
	n, err := j.prune(now)
	if err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want 1 removed", n, err)
	}
	if j.get(old) != nil || j.get(young) == nil || j.get(stuck) == nil {
		t.Errorf("after prune: old %v young %v stuck %v; want only old gone", j.get(old) != nil, j.get(young) != nil, j.get(stuck) != nil)
	}
	if _, err := os.Stat(filepath.Join(dir, old+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pruned record's file: %v; want gone", err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("journal dir mode %v (%v); want 0700", st.Mode().Perm(), err)
	}
	f, err := os.Stat(filepath.Join(dir, young+".json"))
	if err != nil || f.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v (%v); want 0600", f.Mode().Perm(), err)
	}
	again, err := openJournal(dir, testLog(t), now)
	if err != nil {
		t.Fatal(err)
	}
	if again.get(old) != nil || again.get(young) == nil || again.get(stuck) == nil {
		t.Errorf("reopened journal disagrees")
	}
	if u := again.unfinished(); len(u) != 1 || u[0].ID != stuck {
		t.Errorf("unfinished %v; want only %s", u, stuck)
	}
}

// A record that cannot be read keeps its id known (never run again) as a
// failure; a directory that cannot be read fails closed.
func TestJournalUnreadable(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tasks")
	id := newID()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := openJournal(dir, testLog(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := j.get(id)
	if rec == nil || !rec.terminal() || rec.last.GetFailure().GetReason() != directorv1.TaskFailureReason_TASK_FAILURE_REASON_AGENT_RESTARTED {
		t.Errorf("unreadable record read as %+v; want a terminal AGENT_RESTARTED failure", rec)
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openJournal(filepath.Join(dir, id+".json", "x"), testLog(t), time.Now()); err == nil {
		t.Error("a journal path that cannot be a directory opened; want an error")
	}
}

// Statuses of one task coalesce in the outbox (log lines carried over),
// an older resend never replaces a newer status, other messages queue.
func TestOutboxCoalesces(t *testing.T) {
	t.Parallel()
	o := newOutbox()
	id := newID()
	o.status(&directorv1.TaskStatus{TaskId: id, Seq: 2, Phase: directorv1.TaskPhase_TASK_PHASE_RUNNING, Log: []string{"a"}})
	o.push(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Inventory{Inventory: &directorv1.Inventory{}}})
	o.status(&directorv1.TaskStatus{TaskId: id, Seq: 3, Phase: directorv1.TaskPhase_TASK_PHASE_RUNNING, Log: []string{"b"}})
	o.status(&directorv1.TaskStatus{TaskId: id, Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_QUEUED})
	o.dropInventory()
	q := o.take()
	if len(q) != 1 {
		t.Fatalf("%d queued; want 1", len(q))
	}
	st := q[0].GetTaskStatus()
	if st.GetSeq() != 3 || len(st.GetLog()) != 2 || st.GetLog()[0] != "a" {
		t.Errorf("coalesced %v; want seq 3 with lines a, b", st)
	}
	if len(o.take()) != 0 {
		t.Error("take left messages")
	}
}

func TestFailureOf(t *testing.T) {
	t.Parallel()
	R := directorv1.TaskFailureReason_value
	cases := []struct {
		name string
		err  error
		want string
		nf   int
	}{
		{"vm fields", fielderr.New(vm.ErrInvalid, &fielderr.FieldError{Field: "spec.cpus", Value: 0, Msg: "must be at least 1"}), "TASK_FAILURE_REASON_INVALID_ARGUMENT", 1},
		{"image fields", &vm.ImageError{Errs: []*vm.FieldError{{Field: "sha256", Value: "x", Msg: "must be 64 hex digits"}, {Field: "url", Value: "ftp://", Msg: "no"}}}, "TASK_FAILURE_REASON_INVALID_ARGUMENT", 2},
		{"not found", vm.ErrNotFound, "TASK_FAILURE_REASON_NOT_FOUND", 0},
		{"image not found", &vm.ImageNotFoundError{Name: "x"}, "TASK_FAILURE_REASON_NOT_FOUND", 0},
		{"running", &vm.RunningError{Name: "web", Op: "delete", PID: 1}, "TASK_FAILURE_REASON_CONFLICT", 0},
		{"exists", &vm.ImageExistsError{Name: "x"}, "TASK_FAILURE_REASON_CONFLICT", 0},
		{"in use", &vm.ImageInUseError{Name: "x", VMs: []string{"web"}}, "TASK_FAILURE_REASON_CONFLICT", 0},
		{"try pending", netcfg.ErrTryPending, "TASK_FAILURE_REASON_CONFLICT", 0},
		{"checksum", errors.Join(errors.New("image x"), vm.ErrChecksum), "TASK_FAILURE_REASON_CHECKSUM_MISMATCH", 0},
		{"deadline", fmt.Errorf("pull: %w", context.DeadlineExceeded), "TASK_FAILURE_REASON_DEADLINE_EXCEEDED", 0},
		{"typed", &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_ROLLED_BACK, Message: "m"}, "TASK_FAILURE_REASON_ROLLED_BACK", 0},
		{"other", errors.New("disk full"), "TASK_FAILURE_REASON_HOST_ERROR", 0},
	}
	for _, c := range cases {
		f := failureOf(c.err)
		if int32(f.Reason) != R[c.want] || len(f.Fields) != c.nf || f.Message == "" {
			t.Errorf("%s: %v %q with %d fields; want %s with %d", c.name, f.Reason, f.Message, len(f.Fields), c.want, c.nf)
		}
	}
	f := failureOf(fielderr.New(vm.ErrInvalid, &fielderr.FieldError{Field: "spec.cpus", Value: 0, Msg: "must be at least 1"}))
	if fe := f.Fields[0]; fe.GetField() != "spec.cpus" || fe.GetValue() != "0" || fe.GetMessage() != "must be at least 1" {
		t.Errorf("field %v; want spec.cpus, 0, its message", fe)
	}
}

// An apply-network a previous process left on trial (its try noted in the
// journal) is queued again with its try, its seq going on, when the
// network kind can resume; without that it fails AGENT_RESTARTED like any
// other.
func TestResumeNetworkTrial(t *testing.T) {
	t.Parallel()
	j, err := openJournal(filepath.Join(t.TempDir(), "tasks"), testLog(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id := newID()
	deadline := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	if _, err := j.create(&jrecord{ID: id, Kind: KindApplyNetwork, ReceivedAt: time.Now()},
		&directorv1.TaskStatus{TaskId: id, Seq: 3, Phase: directorv1.TaskPhase_TASK_PHASE_RUNNING}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := j.update(id, nil, time.Now(), func(r *jrecord) { r.TryID, r.TryDeadline = "0123456789abcdef", deadline }); err != nil {
		t.Fatal(err)
	}
	tr := newTaskRunner(context.Background(), nil, testLog(t), j, newOutbox(), newSessionCtl(), time.Now)
	tr.resume(j.get(id))
	lt := <-tr.queue
	if lt.id != id || lt.kind != KindApplyNetwork || lt.seq != 3 || lt.resumed == nil || lt.resumed.ID != "0123456789abcdef" || !lt.resumed.Deadline.Equal(deadline) {
		t.Errorf("resumed task %+v; want %s apply-network at seq 3 with its try", lt, id)
	}
	if d, ok := lt.ctx.Deadline(); !ok || !d.Equal(deadline.Add(resumeGrace)) {
		t.Errorf("resumed task deadline %v; want the trial's plus %s", d, resumeGrace)
	}
	if env := tr.env(lt); env.Resumed != lt.resumed {
		t.Errorf("the kind's env has no Resumed")
	}
	// reopened: the try is in the journal file
	again, err := openJournal(j.dir, testLog(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r := again.get(id); r.TryID != "0123456789abcdef" || !r.TryDeadline.Equal(deadline) {
		t.Errorf("journalled try %q until %v; want it durable", r.TryID, r.TryDeadline)
	}
}

// What the agent advertises: the VM and image kinds only where QEMU's
// binary check passed (tcg), apply-network only as root (and with its
// code), collect-diagnostics always.
func TestTaskKindsAdvertised(t *testing.T) {
	t.Parallel()
	tcg := []*directorv1.Capability{{Name: "kvm"}, {Name: "tcg", Available: true}}
	noTCG := []*directorv1.Capability{{Name: "tcg", Available: false}}
	vmKinds := []string{KindCreateVM, KindStartVM, KindStopVM, KindRebootVM, KindDeleteVM, KindPullImage}
	cases := []struct {
		name string
		caps []*directorv1.Capability
		euid int
		want []string
	}{
		{"qemu, not root", tcg, 1000, append(slices.Clone(vmKinds), KindCollectDiagnostics)},
		{"no qemu, not root", noTCG, 1000, []string{KindCollectDiagnostics}},
		{"no qemu, root", noTCG, 0, []string{KindApplyNetwork, KindCollectDiagnostics}},
		{"qemu, root", tcg, 0, append(slices.Clone(vmKinds), KindApplyNetwork, KindCollectDiagnostics)},
		{"no checks", nil, 1000, []string{KindCollectDiagnostics}},
	}
	for _, c := range cases {
		want := c.want
		if applyNetworkFunc == nil {
			want = slices.DeleteFunc(slices.Clone(want), func(k string) bool { return k == KindApplyNetwork })
		}
		if got := taskKinds(c.caps, c.euid); !slices.Equal(got, want) {
			t.Errorf("%s: %v; want %v", c.name, got, want)
		}
	}
}

// Restart asks for 1 s reconnects; they end with the wait for the
// session (up or given up), not only when a session comes.
func TestSessionCtlFastEnds(t *testing.T) {
	t.Parallel()
	c := newSessionCtl()
	c.Restart("network changed")
	if !c.fast.Load() {
		t.Fatal("Restart did not ask for fast reconnects")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.WaitUp(ctx, time.Now()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitUp with no session: %v", err)
	}
	if c.fast.Load() {
		t.Error("fast reconnects go on after the wait gave up")
	}
}

// A running task's log lines go out by themselves (not only with its
// next status), through the same 4-a-second throttle.
func TestTaskLogLinesFlushed(t *testing.T) {
	t.Parallel()
	j, err := openJournal(filepath.Join(t.TempDir(), "tasks"), testLog(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out := newOutbox()
	tr := newTaskRunner(context.Background(), nil, testLog(t), j, out, newSessionCtl(), time.Now)
	id := newID()
	if _, err := j.create(&jrecord{ID: id, Kind: KindStopVM, ReceivedAt: time.Now()}, &directorv1.TaskStatus{TaskId: id, Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_QUEUED}, time.Now()); err != nil {
		t.Fatal(err)
	}
	lt := &liveTask{id: id, seq: 1}
	tr.send(lt, directorv1.TaskPhase_TASK_PHASE_RUNNING, nil, nil)
	out.take()
	env := tr.env(lt)
	env.Log.Info("guest did not power off in time; sending quit", "vm", "web")
	env.Log.Debug("not a line")
	got := takeN(out, 1)
	if len(got) != 1 {
		t.Fatalf("%d statuses after a log line; want 1", len(got))
	}
	st := got[0].GetTaskStatus()
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_RUNNING || len(st.GetLog()) != 1 || st.GetLog()[0] != "guest did not power off in time; sending quit vm=web" {
		t.Errorf("status %v; want RUNNING with the one INFO line", st)
	}
	long := strings.Repeat("é", maxLogLine)
	env.Log.Info(long)
	if got := takeN(out, 1); len(got) != 1 || len(got[0].GetTaskStatus().GetLog()[0]) > maxLogLine {
		t.Errorf("a long line: %v; want one status with a line of at most %d bytes", got, maxLogLine)
	}
}
