package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/taskkind"
	"github.com/virtcon/virtcon/host"
)

// Task kinds as the director and the CLI spell them (Register.task_kinds).
const (
	KindCreateVM           = taskkind.CreateVM
	KindStartVM            = taskkind.StartVM
	KindStopVM             = taskkind.StopVM
	KindRebootVM           = taskkind.RebootVM
	KindDeleteVM           = taskkind.DeleteVM
	KindPullImage          = taskkind.PullImage
	KindApplyNetwork       = taskkind.ApplyNetwork
	KindCollectDiagnostics = taskkind.CollectDiagnostics
)

// The runner's bounds.
const (
	taskWorkers = 4
	// taskQueueMax tasks may wait for a worker; one more is BUSY.
	taskQueueMax = 64
	// progressEvery bounds progress statuses: at most 4 a second per
	// task, plus the final one.
	progressInterval = 250 * time.Millisecond
	// maxLogLines and maxLogLine bound a task's log lines.
	maxLogLines = 100
	maxLogLine  = 512
	// pruneEvery is how often the journal is pruned while Run runs.
	pruneEvery = time.Hour
)

// taskEnv is what a kind's code gets besides its message.
type taskEnv struct {
	ID   string
	Host *host.Host
	Log  *slog.Logger // INFO+ records become the task's log lines
	// Progress reports how far the task is (statuses throttled to 4/s).
	Progress func(done, total int64, unit string)
	// Note journals a network trial (durably) before the kind relies on it.
	Note    func(tryID string, tryDeadline time.Time) error
	Session sessionControl
	// Resumed, for an apply-network only, is the trial a previous agent
	// process began (journalled by Note) and did not end: the kind picks
	// it up where it was instead of applying anything.
	Resumed *resumedTry
}

// resumedTry is a network trial from the journal.
type resumedTry struct {
	ID       string
	Deadline time.Time
}

// resumesNetwork says that runApplyNetwork handles taskEnv.Resumed (set by
// task_network.go): only then is an apply-network left on trial by a
// previous process resumed rather than failed AGENT_RESTARTED.
var resumesNetwork bool

// resumeGrace is how long past its trial's deadline a resumed
// apply-network may run (to see the watchdog's rollback).
const resumeGrace = time.Minute

// sessionControl is what a task may do with the director session.
type sessionControl interface {
	// Restart ends the current session with a Goodbye (reason) and dials
	// again at once, retrying every 1 s (no backoff growth) until ctx ends
	// or a session is up.
	Restart(reason string)
	// WaitUp blocks until a session dialled after since has been
	// Registered and has had one HeartbeatAck; it returns that
	// connection's local address.
	WaitUp(ctx context.Context, since time.Time) (localAddr string, err error)
}

// taskFailure is the typed failure a kind returns; the runner sends it
// as-is.
type taskFailure struct {
	Reason  directorv1.TaskFailureReason
	Message string
	Fields  []*directorv1.FieldError
}

func (f *taskFailure) Error() string {
	return strings.ToLower(strings.TrimPrefix(f.Reason.String(), "TASK_FAILURE_REASON_")) + ": " + f.Message
}

func (f *taskFailure) proto() *directorv1.TaskFailure {
	return &directorv1.TaskFailure{Reason: f.Reason, Message: f.Message, Fields: f.Fields}
}

// errCancelled is the cause of a task ctx ended by the director's
// CancelTask.
var errCancelled = errors.New("cancelled by the director")

// kindOf names a task's kind ("" for an empty oneof: a kind this agent's
// protocol does not know).
func kindOf(t *directorv1.Task) string { return taskkind.Of(t) }

// summary is a task's one-line description: kind and target, never user
// data.
func summary(t *directorv1.Task) string {
	switch k := t.GetKind().(type) {
	case *directorv1.Task_StartVm:
		return KindStartVM + " " + k.StartVm.GetVm()
	case *directorv1.Task_StopVm:
		return KindStopVM + " " + k.StopVm.GetVm()
	case *directorv1.Task_RebootVm:
		return KindRebootVM + " " + k.RebootVm.GetVm()
	case *directorv1.Task_DeleteVm:
		return KindDeleteVM + " " + k.DeleteVm.GetVm()
	case *directorv1.Task_PullImage:
		return KindPullImage + " " + k.PullImage.GetName()
	}
	if k := kindOf(t); k != "" {
		return k
	}
	return "unknown kind"
}

// taskKinds is what this host runs: the VM and image kinds when QEMU can
// run here (the tcg capability), apply-network only as root and when the
// agent has the code for it, collect-diagnostics always.
func taskKinds(caps []*directorv1.Capability, euid int) []string {
	var kinds []string
	for _, c := range caps {
		if c.GetName() == "tcg" && c.GetAvailable() {
			kinds = append(kinds, KindCreateVM, KindStartVM, KindStopVM, KindRebootVM, KindDeleteVM, KindPullImage)
		}
	}
	if euid == 0 && applyNetworkFunc != nil {
		kinds = append(kinds, KindApplyNetwork)
	}
	return append(kinds, KindCollectDiagnostics)
}

// applyNetworkFunc runs an apply-network task (task_network.go); nil
// while the agent has no code for it: the kind is then neither
// advertised nor run.
var applyNetworkFunc func(ctx context.Context, env *taskEnv, t *directorv1.ApplyNetwork) (*directorv1.TaskResult, error)

// taskRunner takes the director's tasks: it journals each, queues it for
// a worker, runs it through task_exec.go and puts its statuses in the
// outbox. Tasks outlive sessions: they go on while the agent reconnects.
type taskRunner struct {
	h    *host.Host
	log  *slog.Logger
	j    *journal
	out  *outbox
	sess sessionControl
	now  func() time.Time

	ctx   context.Context // Run's: ends the tasks when the agent stops
	queue chan *liveTask
	// one apply-network and one collect-diagnostics at a time
	netSem, diagSem chan struct{}

	mu     sync.Mutex
	kinds  map[string]bool
	live   map[string]*liveTask
	queued int
	// sessions counts sessions up (Registered): a data sender restarts
	// from its last acknowledged offset when it changes.
	sessions    uint64
	sessionsNew chan struct{} // closed and replaced at each new session

	// the director's task messages, in the order they came, for the
	// dispatcher (the session loop never waits for a journal write)
	inMu    sync.Mutex
	inbox   []delivery
	inReady chan struct{}
}

type delivery struct {
	msg *directorv1.SessionResponse
	at  time.Time
}

// liveTask is a task of this process, queued or running.
type liveTask struct {
	id       string
	kind     string
	t        *directorv1.Task
	ctx      context.Context
	cancel   context.CancelCauseFunc
	received time.Time

	mu        sync.Mutex
	seq       uint64
	phase     directorv1.TaskPhase
	progress  *directorv1.Progress
	lastSent  time.Time // the throttle of RUNNING statuses
	flushSoon bool      // a timer sends the waiting log lines
	logs      []string
	ended     bool
	// claimed: a worker took the task, or it ended while queued (a
	// cancel or its deadline): whichever comes first, never both
	claimed bool
	resumed *resumedTry
	acks    chan uint64 // TaskDataAck offsets (collect-diagnostics)
}

func newTaskRunner(ctx context.Context, h *host.Host, log *slog.Logger, j *journal, out *outbox, sess sessionControl, now func() time.Time) *taskRunner {
	return &taskRunner{
		h: h, log: log, j: j, out: out, sess: sess, now: now, ctx: ctx,
		queue:  make(chan *liveTask, taskQueueMax),
		netSem: make(chan struct{}, 1), diagSem: make(chan struct{}, 1),
		kinds: map[string]bool{}, live: map[string]*liveTask{},
		sessionsNew: make(chan struct{}), inReady: make(chan struct{}, 1),
	}
}

// deliver hands a Task, CancelTask or TaskDataAck to the dispatcher; it
// never blocks.
func (tr *taskRunner) deliver(m *directorv1.SessionResponse, at time.Time) {
	tr.inMu.Lock()
	tr.inbox = append(tr.inbox, delivery{m, at})
	tr.inMu.Unlock()
	select {
	case tr.inReady <- struct{}{}:
	default:
	}
}

// dispatch handles the delivered messages in order until ctx ends.
func (tr *taskRunner) dispatch(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tr.inReady:
		}
		tr.inMu.Lock()
		in := tr.inbox
		tr.inbox = nil
		tr.inMu.Unlock()
		for _, d := range in {
			switch m := d.msg.GetMsg().(type) {
			case *directorv1.SessionResponse_Task:
				tr.take(m.Task, d.at)
			case *directorv1.SessionResponse_CancelTask:
				tr.cancelTask(m.CancelTask.GetTaskId())
			case *directorv1.SessionResponse_TaskDataAck:
				tr.dataAck(m.TaskDataAck)
			}
		}
	}
}

// setKinds is what the agent advertises and so runs.
func (tr *taskRunner) setKinds(kinds []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.kinds = map[string]bool{}
	for _, k := range kinds {
		tr.kinds[k] = true
	}
}

// failInterrupted fails the tasks a previous process left Queued or Running:
// their effect is unknown and they are never run again.
func (tr *taskRunner) failInterrupted() {
	now := tr.now()
	for _, rec := range tr.j.unfinished() {
		if rec.Kind == KindApplyNetwork && rec.TryID != "" && resumesNetwork && len(tr.queue) < taskQueueMax {
			tr.resume(rec)
			continue
		}
		st := &directorv1.TaskStatus{TaskId: rec.ID, Seq: rec.Seq + 1, Phase: directorv1.TaskPhase_TASK_PHASE_FAILED,
			Progress: rec.last.GetProgress(),
			Failure: &directorv1.TaskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_AGENT_RESTARTED,
				Message: fmt.Sprintf("the agent stopped while the task was %s; its effect is unknown and it is not run again",
					strings.ToLower(strings.TrimPrefix(rec.Phase, "TASK_PHASE_")))}}
		if err := tr.j.update(rec.ID, st, now, nil); err != nil {
			tr.log.Error("task journal: cannot record an interrupted task as failed", "task", rec.ID, "err", err)
			continue
		}
		tr.log.Warn("task interrupted by an agent restart: failed, not run again", "task", rec.ID, "kind", rec.Kind, "summary", rec.Summary)
		tr.out.status(st)
	}
}

// resume queues an apply-network a previous process left on trial: its
// seq goes on from the journal's, its deadline is the trial's plus
// resumeGrace. Called before run, so the queue has room.
func (tr *taskRunner) resume(rec *jrecord) {
	ctx, cancel := context.WithDeadline(tr.ctx, rec.TryDeadline.Add(resumeGrace))
	cctx, ccancel := context.WithCancelCause(ctx)
	lt := &liveTask{id: rec.ID, kind: KindApplyNetwork, ctx: cctx, received: rec.ReceivedAt, seq: rec.Seq, phase: phaseOf(rec.Phase),
		t:       &directorv1.Task{Id: rec.ID, DeadlineInMs: time.Until(rec.TryDeadline.Add(resumeGrace)).Milliseconds(), Kind: &directorv1.Task_ApplyNetwork{ApplyNetwork: &directorv1.ApplyNetwork{}}},
		resumed: &resumedTry{ID: rec.TryID, Deadline: rec.TryDeadline},
		cancel:  func(cause error) { ccancel(cause); cancel() }}
	tr.mu.Lock()
	tr.live[rec.ID] = lt
	tr.queued++
	tr.mu.Unlock()
	tr.log.Warn("network trial of a previous agent process resumed", "task", rec.ID, "try", rec.TryID, "until", rec.TryDeadline)
	context.AfterFunc(lt.ctx, func() { tr.endQueued(lt) })
	tr.queue <- lt
}

// run starts the workers and prunes the journal until ctx ends; it
// returns when every worker has.
func (tr *taskRunner) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { tr.dispatch(ctx) })
	for range taskWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case lt := <-tr.queue:
					tr.mu.Lock()
					tr.queued--
					tr.mu.Unlock()
					tr.execute(lt)
				}
			}
		})
	}
	tr.prune()
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
			tr.prune()
		}
	}
}

func (tr *taskRunner) prune() {
	n, err := tr.j.prune(tr.now())
	if err != nil {
		tr.log.Warn("task journal: prune", "err", err)
	}
	if n > 0 {
		tr.log.Info("task journal pruned", "removed", n)
	}
}

// take handles a Task from the director. It journals the task durably
// before its Queued status goes out. It never blocks on a worker: the
// session loop calls it (a journal write is its only wait).
func (tr *taskRunner) take(t *directorv1.Task, received time.Time) {
	id := t.GetId()
	if !validTaskID(id) {
		tr.log.Warn("task refused: its id is not a UUID", "task", id)
		if id != "" && len(id) <= 64 {
			tr.out.status(&directorv1.TaskStatus{TaskId: id, Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_FAILED,
				Failure: &directorv1.TaskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT, Message: "task id is not a UUID",
					Fields: []*directorv1.FieldError{{Field: "id", Value: id, Message: "must be a UUID"}}}})
		}
		return
	}
	if rec := tr.j.get(id); rec != nil {
		tr.log.Info("task redelivered: its last status sent again, not run again", "task", id, "phase", rec.Phase)
		tr.resendOne(id, rec.last)
		return
	}
	kind := kindOf(t)
	rec := &jrecord{ID: id, Kind: kind, Summary: summary(t), ReceivedAt: received.UTC()}
	if kind == "" {
		rec.Kind = "unknown"
	}
	st := &directorv1.TaskStatus{TaskId: id, Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_QUEUED}
	var fail *taskFailure
	tr.mu.Lock()
	switch {
	case kind == "" || !tr.kinds[kind]:
		what := "a kind this agent does not know"
		if kind != "" {
			what = kind
		}
		fail = &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_UNSUPPORTED_KIND,
			Message: fmt.Sprintf("this agent does not run %s; it runs: %s", what, tr.kindListLocked())}
	case t.GetDeadlineInMs() <= 0:
		fail = &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT, Message: "the task has no deadline",
			Fields: []*directorv1.FieldError{{Field: "deadline_in_ms", Value: fmt.Sprint(t.GetDeadlineInMs()), Message: "must be positive"}}}
	case tr.queued >= taskQueueMax:
		fail = &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_BUSY,
			Message: fmt.Sprintf("the agent's queue is full (%d tasks waiting)", taskQueueMax)}
	}
	var lt *liveTask
	if fail == nil {
		ctx, cancel := context.WithDeadlineCause(tr.ctx, received.Add(time.Duration(t.GetDeadlineInMs())*time.Millisecond), context.DeadlineExceeded)
		cctx, ccancel := context.WithCancelCause(ctx)
		lt = &liveTask{id: id, kind: kind, t: t, ctx: cctx, received: received, seq: 1, phase: st.Phase,
			cancel: func(cause error) { ccancel(cause); cancel() }}
		tr.live[id] = lt
		tr.queued++
	}
	tr.mu.Unlock()
	if fail != nil {
		st.Phase, st.Failure = directorv1.TaskPhase_TASK_PHASE_FAILED, fail.proto()
	}
	if exists, err := tr.j.create(rec, st, tr.now()); err != nil || exists {
		if lt != nil {
			tr.mu.Lock()
			delete(tr.live, id)
			tr.queued--
			tr.mu.Unlock()
			lt.cancel(context.Canceled)
		}
		if exists {
			tr.resendOne(id, tr.j.get(id).last)
			return
		}
		// not journalled: not run (a redelivery could run it twice)
		tr.log.Error("task journal not written: task not taken", "task", id, "err", err)
		tr.out.status(&directorv1.TaskStatus{TaskId: id, Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_FAILED,
			Failure: &directorv1.TaskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_HOST_ERROR,
				Message: "the agent cannot journal the task: " + err.Error()}})
		return
	}
	tr.out.status(st)
	if fail != nil {
		tr.log.Warn("task refused", "task", id, "kind", rec.Kind, "reason", fail.Reason.String(), "err", fail.Message)
		return
	}
	tr.log.Info("task queued", "task", id, "summary", rec.Summary, "deadline", time.Duration(t.GetDeadlineInMs())*time.Millisecond)
	context.AfterFunc(lt.ctx, func() { tr.endQueued(lt) })
	tr.queue <- lt // room: queued was below taskQueueMax
}

// endQueued ends a task whose ctx ended (a cancel, its deadline) while it
// waits for a worker: at once, not when a worker is free (that could be
// hours behind long pulls). The worker that takes it later skips it. When
// the agent stops, nothing is sent: the record stays and the next Run
// reports it AGENT_RESTARTED.
func (tr *taskRunner) endQueued(lt *liveTask) {
	if tr.ctx.Err() != nil {
		return
	}
	lt.mu.Lock()
	if lt.claimed {
		lt.mu.Unlock()
		return
	}
	lt.claimed = true
	lt.mu.Unlock()
	err := lt.ctx.Err()
	f, phase := tr.failure(lt, err)
	tr.send(lt, phase, nil, f)
	tr.log.Info("task ended while queued", "task", lt.id, "kind", lt.kind, "phase", phase.String(), "err", err)
}

func (tr *taskRunner) kindListLocked() string {
	ks := make([]string, 0, len(tr.kinds))
	for k := range tr.kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	if len(ks) == 0 {
		return "no kinds"
	}
	return strings.Join(ks, ", ")
}

// resendOne sends a task's last status again: the live one's when this
// process runs it (the journal keeps progress in memory only).
func (tr *taskRunner) resendOne(id string, last *directorv1.TaskStatus) {
	if last != nil {
		tr.out.status(last)
	}
}

// cancelTask cancels a queued or running task; an unknown or ended one is
// ignored.
func (tr *taskRunner) cancelTask(id string) {
	tr.mu.Lock()
	lt := tr.live[id]
	tr.mu.Unlock()
	if lt == nil {
		tr.log.Info("cancel of a task not running here: ignored", "task", id)
		return
	}
	tr.log.Info("task cancel requested", "task", id)
	lt.cancel(errCancelled)
}

// dataAck routes a TaskDataAck to its task.
func (tr *taskRunner) dataAck(a *directorv1.TaskDataAck) {
	tr.mu.Lock()
	lt := tr.live[a.GetTaskId()]
	tr.mu.Unlock()
	if lt == nil || lt.acks == nil {
		return
	}
	select {
	case lt.acks <- a.GetOffset():
	default: // a full channel holds newer offsets' worth of news
	}
}

// registered is called after every Registered: the last status of each
// task not ended or ended within the hour goes again, and data senders
// restart from their last acknowledged offset.
func (tr *taskRunner) registered() {
	for _, st := range tr.j.resendable(tr.now()) {
		tr.out.status(st)
	}
	tr.registeredSessions()
}

// registeredSessions wakes the data senders: a new session is up.
func (tr *taskRunner) registeredSessions() {
	tr.mu.Lock()
	tr.sessions++
	close(tr.sessionsNew)
	tr.sessionsNew = make(chan struct{})
	tr.mu.Unlock()
}

// newSession is closed at the next Registered.
func (tr *taskRunner) newSession() <-chan struct{} {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.sessionsNew
}

// execute runs one task on a worker and sends its statuses.
func (tr *taskRunner) execute(lt *liveTask) {
	defer func() {
		tr.mu.Lock()
		delete(tr.live, lt.id)
		tr.mu.Unlock()
		lt.cancel(context.Canceled)
	}()
	lt.mu.Lock()
	skip := lt.claimed // it ended while queued: endQueued sent that
	lt.claimed = true
	lt.mu.Unlock()
	if skip {
		return
	}
	if lt.ctx.Err() == nil {
		switch lt.kind {
		case KindApplyNetwork:
			if !tr.acquire(lt.ctx, tr.netSem) {
				break
			}
			defer func() { <-tr.netSem }()
		case KindCollectDiagnostics:
			if !tr.acquire(lt.ctx, tr.diagSem) {
				break
			}
			defer func() { <-tr.diagSem }()
		}
	}
	var res *directorv1.TaskResult
	var err error
	if err = lt.ctx.Err(); err == nil {
		tr.send(lt, directorv1.TaskPhase_TASK_PHASE_RUNNING, nil, nil)
		tr.log.Info("task running", "task", lt.id, "kind", lt.kind)
		env := tr.env(lt)
		res, err = tr.exec(lt.ctx, env, lt)
	}
	if tr.ctx.Err() != nil && err != nil {
		// the agent stops: the record stays Running and the next Run
		// reports it as interrupted (AGENT_RESTARTED)
		tr.log.Warn("task interrupted: the agent stops", "task", lt.id, "err", err)
		return
	}
	if err == nil {
		tr.send(lt, directorv1.TaskPhase_TASK_PHASE_SUCCEEDED, res, nil)
		tr.log.Info("task succeeded", "task", lt.id, "kind", lt.kind)
		return
	}
	f, phase := tr.failure(lt, err)
	tr.send(lt, phase, nil, f)
	tr.log.Info("task ended", "task", lt.id, "kind", lt.kind, "phase", phase.String(), "err", err)
}

func (tr *taskRunner) acquire(ctx context.Context, sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// failure is the terminal phase and failure for err: a kind's own
// taskFailure as it is, a cancel CANCELLED, a passed deadline
// DEADLINE_EXCEEDED, anything else through taskerr.go's switch.
func (tr *taskRunner) failure(lt *liveTask, err error) (*directorv1.TaskFailure, directorv1.TaskPhase) {
	var tf *taskFailure
	if errors.As(err, &tf) {
		return tf.proto(), directorv1.TaskPhase_TASK_PHASE_FAILED
	}
	if lt.ctx.Err() != nil {
		switch cause := context.Cause(lt.ctx); {
		case errors.Is(cause, errCancelled):
			return nil, directorv1.TaskPhase_TASK_PHASE_CANCELLED
		case errors.Is(cause, context.DeadlineExceeded):
			return (&taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_DEADLINE_EXCEEDED,
					Message: fmt.Sprintf("the task's deadline (%s after receipt) passed: %v", time.Duration(lt.t.GetDeadlineInMs())*time.Millisecond, err)}).proto(),
				directorv1.TaskPhase_TASK_PHASE_FAILED
		}
	}
	return failureOf(err).proto(), directorv1.TaskPhase_TASK_PHASE_FAILED
}

// env is a task's environment: its logger captures INFO+ records as the
// task's log lines, and so do the host services it gets (built for the
// task on the same layout and host root: they hold no state of their
// own, so the host's own words, "guest did not power off in time;
// sending quit", are the task's lines); Progress throttles progress
// statuses.
func (tr *taskRunner) env(lt *liveTask) *taskEnv {
	log := slog.New(&captureHandler{next: tr.log.Handler().WithAttrs([]slog.Attr{slog.String("task", lt.id)}), lt: lt, tr: tr})
	h := tr.h
	if h != nil {
		h = host.New(host.Options{Layout: h.Layout, HostRoot: h.HostRoot, Logger: log})
	}
	return &taskEnv{
		ID:   lt.id,
		Host: h,
		Log:  log,
		Progress: func(done, total int64, unit string) {
			lt.mu.Lock()
			lt.progress = &directorv1.Progress{Done: done, Total: total, Unit: unit}
			due := tr.now().Sub(lt.lastSent) >= progressInterval
			lt.mu.Unlock()
			if due {
				tr.send(lt, directorv1.TaskPhase_TASK_PHASE_RUNNING, nil, nil)
			}
		},
		Note: func(tryID string, tryDeadline time.Time) error {
			return tr.j.update(lt.id, nil, tr.now(), func(r *jrecord) { r.TryID, r.TryDeadline = tryID, tryDeadline.UTC() })
		},
		Session: tr.sess,
		Resumed: lt.resumed,
	}
}

// send journals and queues lt's next status. Terminal ones end the task:
// nothing is sent after them.
func (tr *taskRunner) send(lt *liveTask, phase directorv1.TaskPhase, res *directorv1.TaskResult, f *directorv1.TaskFailure) {
	lt.mu.Lock()
	if lt.ended {
		lt.mu.Unlock()
		return
	}
	lt.seq++
	st := &directorv1.TaskStatus{TaskId: lt.id, Seq: lt.seq, Phase: phase, Progress: lt.progress, Log: lt.logs, Failure: f, Result: res}
	lt.logs = nil
	lt.phase = phase
	lt.lastSent = tr.now()
	if terminalPhase(phase) {
		lt.ended = true
	}
	// under lt.mu: statuses of one task reach the journal and the outbox
	// in seq order
	if err := tr.j.update(lt.id, st, tr.now(), nil); err != nil {
		tr.log.Error("task journal not written", "task", lt.id, "phase", phase.String(), "err", err)
	}
	tr.out.status(st)
	lt.mu.Unlock()
}

// logged sends a running task's new log lines through the throttle: at
// once when the last status is older than progressInterval, else by a
// timer when that has passed (they need not wait for the task's end).
func (tr *taskRunner) logged(lt *liveTask) {
	lt.mu.Lock()
	if lt.ended || lt.phase != directorv1.TaskPhase_TASK_PHASE_RUNNING || lt.flushSoon {
		lt.mu.Unlock()
		return
	}
	wait := progressInterval - tr.now().Sub(lt.lastSent)
	if wait > 0 {
		lt.flushSoon = true
	}
	lt.mu.Unlock()
	if wait <= 0 {
		tr.send(lt, directorv1.TaskPhase_TASK_PHASE_RUNNING, nil, nil)
		return
	}
	time.AfterFunc(wait, func() {
		lt.mu.Lock()
		lt.flushSoon = false
		due := len(lt.logs) > 0 && !lt.ended
		lt.mu.Unlock()
		if due {
			tr.send(lt, directorv1.TaskPhase_TASK_PHASE_RUNNING, nil, nil)
		}
	})
}

// captureHandler passes records on and keeps INFO+ ones as the task's log
// lines (at most maxLogLines waiting, each at most maxLogLine bytes).
type captureHandler struct {
	next  slog.Handler
	lt    *liveTask
	tr    *taskRunner
	attrs []slog.Attr
}

func (c *captureHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || c.next.Enabled(ctx, l)
}

func (c *captureHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		var b strings.Builder
		b.WriteString(r.Message)
		add := func(a slog.Attr) bool {
			if a.Key != "" {
				fmt.Fprintf(&b, " %s=%v", a.Key, a.Value.Resolve())
			}
			return true
		}
		for _, a := range c.attrs {
			add(a)
		}
		r.Attrs(add)
		line := b.String()
		if len(line) > maxLogLine {
			line = truncUTF8(line, maxLogLine)
		}
		c.lt.mu.Lock()
		c.lt.logs = capLines(append(c.lt.logs, line))
		c.lt.mu.Unlock()
		c.tr.logged(c.lt)
	}
	if c.next.Enabled(ctx, r.Level) {
		return c.next.Handle(ctx, r)
	}
	return nil
}

func (c *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{next: c.next.WithAttrs(as), lt: c.lt, tr: c.tr, attrs: append(append([]slog.Attr(nil), c.attrs...), as...)}
}

func (c *captureHandler) WithGroup(name string) slog.Handler {
	return &captureHandler{next: c.next.WithGroup(name), lt: c.lt, tr: c.tr, attrs: c.attrs}
}

// truncUTF8 cuts s to at most n bytes, not inside a UTF-8 sequence.
func truncUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// removeQuiet removes a file, saying so when it cannot.
func removeQuiet(log *slog.Logger, path string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("cannot remove", "path", path, "err", err)
	}
}
