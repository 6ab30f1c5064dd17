package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/virtcon/virtcon/api/directorv1"
)

// outQueue bounds the messages waiting to go to one agent. A session
// that falls this far behind is cut: its agent reconnects and gets every
// task it still has to run on Register.
const outQueue = 1024

// progressEvery is how often a task's progress-only statuses are written
// (phase changes are written at once).
const progressEvery = 500 * time.Millisecond

// held is the session this replica holds for node, nil when none: the one
// place where a node's messages are routed (tasks, cancels, resyncs).
func (d *Director) held(node string) *liveSession {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sessions[node]
}

// enqueue queues m for the session's agent; a full queue cuts the
// session. False when the session is over or was cut.
func (s *liveSession) enqueue(m *directorv1.SessionResponse) bool {
	select {
	case <-s.ended:
		return false
	default:
	}
	select {
	case s.out <- m:
		return true
	default:
		s.cut(nil, "too far behind: outbound queue full")
		return false
	}
}

// offer sends the agent what a task record asks for: the task when it is
// not ended and not sent on this session yet and its deadline is ahead,
// a CancelTask when a cancel was requested. Sending twice is harmless
// (the agent keeps a journal of task ids); this only saves the traffic.
func (d *Director) offer(s *liveSession, r *taskRecord) {
	s.taskMu.Lock()
	sendCancel := r.CancelRequested && !s.cancelSent[r.ID]
	if sendCancel {
		s.cancelSent[r.ID] = true
	}
	left := fromMS(r.Deadline).Sub(d.now())
	sendTask := !r.Ended && !r.CancelRequested && !s.sent[r.ID] && left > 0
	if sendTask {
		s.sent[r.ID] = true
	}
	s.taskMu.Unlock()
	if sendTask {
		t, err := r.task()
		if err != nil {
			d.log.Warn("director: unreadable task record: not sent", "node", r.Node, "task", r.ID, "err", err)
		} else {
			t.DeadlineInMs = max(1, left.Milliseconds())
			s.enqueue(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Task{Task: t}})
		}
	}
	if sendCancel {
		// Also for a task never sent on this session: an earlier one may
		// have delivered it, and an agent ignores an id it does not know.
		s.enqueue(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_CancelTask{
			CancelTask: &directorv1.CancelTask{TaskId: r.ID}}})
	}
}

// currentRev is the store's revision now.
func (d *Director) currentRev(ctx context.Context, prefix string) (int64, error) {
	resp, err := d.store.Client().Get(ctx, d.store.Prefix()+prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("director: read revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// followTasks sends each task written under tasks/ (through any replica)
// to its node when this replica holds the node's session, and its
// CancelTask when a cancel is requested.
func (d *Director) followTasks(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range d.store.Watch(ctx, preTasks, rev+1) {
			if ev.Status() || ev.Deleted {
				continue
			}
			rev = ev.Rev
			node, _, ok := strings.Cut(strings.TrimPrefix(ev.Key, preTasks), "/")
			if !ok {
				continue
			}
			s := d.held(node)
			if s == nil {
				continue
			}
			var r taskRecord
			if err := json.Unmarshal(ev.Raw, &r); err != nil {
				d.log.Warn("director: unreadable task record: ignored", "key", ev.Key, "err", err)
				continue
			}
			if s.w.fromWatch(ev.Rev, &r) {
				d.offer(s, &r)
			}
		}
		if ctx.Err() != nil {
			return
		}
		// Compacted: watch from now, and offer every held node its
		// tasks again (those written in between).
		d.log.Warn("director: task watch ended: listing again")
		for ctx.Err() == nil {
			var err error
			if rev, err = d.currentRev(ctx, preTasks); err == nil {
				break
			}
			d.log.Error("director: task watch", "err", err)
			sleepCtx(ctx, time.Second)
		}
		d.mu.Lock()
		var held []*liveSession
		for _, s := range d.sessions {
			held = append(held, s)
		}
		d.mu.Unlock()
		for _, s := range held {
			d.sendPending(ctx, s)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// sendPending offers a newly registered session every task of its node
// that is not terminal: those written while no replica held the node.
func (d *Director) sendPending(ctx context.Context, s *liveSession) {
	// Tasks first: the watch's events up to this listing's revision are
	// in it. Their statuses, read after, are at least as new (a task's
	// status is written with it; one missing counts as pending).
	var recs []*taskRecord
	rev, err := d.store.ListRev(ctx, preTasks+s.node+"/", func(key string, _ int64, raw []byte) error {
		var r taskRecord
		if json.Unmarshal(raw, &r) == nil && !r.Ended {
			recs = append(recs, &r)
		}
		return nil
	})
	if err == nil && len(recs) > 0 {
		phases := map[string]directorv1.TaskPhase{}
		err = d.store.List(ctx, preTaskStatus+s.node+"/", func(key string, _ int64, raw []byte) error {
			var st taskStatusRecord
			if json.Unmarshal(raw, &st) == nil {
				phases[key[strings.LastIndexByte(key, '/')+1:]] = st.phase()
			}
			return nil
		})
		recs = slices.DeleteFunc(recs, func(r *taskRecord) bool { return terminal(phases[r.ID]) })
	}
	if err != nil {
		d.log.Warn("director: list the node's tasks: they are sent when the agent registers again", "node", s.node, "err", err)
		s.w.listed(1) // the watch's events all count then
		return
	}
	for _, r := range recs {
		d.offer(s, r)
	}
	for _, r := range s.w.listed(rev) {
		d.offer(s, r)
	}
}

// sessionWriter writes what a session's agent sends (task statuses,
// bulk data, inventory) to the store on a goroutine of its own, so that
// the goroutine answering heartbeats never waits for etcd. Statuses are
// merged per task (the highest seq, the log lines of all), progress-only
// ones written at most every progressEvery; phase changes at once.
type sessionWriter struct {
	d *Director
	s *liveSession

	// The tasks/ watch's events are judged against the listing made when
	// the session registered: one at or before its revision is stale (the
	// listing saw what came of it: a task ended since is not sent again);
	// those that come while the listing runs wait for it.
	lmu      sync.Mutex
	listRev  int64 // 0 while the listing runs
	deferred []revRecord

	mu       sync.Mutex
	statuses map[string]*pendingStatus
	data     []*directorv1.TaskData
	inv      *inventoryRecord // the latest snapshot not written yet
	kick     chan struct{}

	// writer goroutine only
	lastWrite map[string]time.Time
	lastPhase map[string]directorv1.TaskPhase
	invOnce   bool
}

type revRecord struct {
	rev int64
	r   *taskRecord
}

// fromWatch says whether a watch event of rev is to be offered now; one
// that came during the listing is kept for listed.
func (w *sessionWriter) fromWatch(rev int64, r *taskRecord) bool {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	if w.listRev == 0 {
		w.deferred = append(w.deferred, revRecord{rev, r})
		return false
	}
	return rev > w.listRev
}

// listed records the listing's revision and returns the events that came
// meanwhile and are newer than it.
func (w *sessionWriter) listed(rev int64) []*taskRecord {
	w.lmu.Lock()
	defer w.lmu.Unlock()
	w.listRev = rev
	var out []*taskRecord
	for _, e := range w.deferred {
		if e.rev > rev {
			out = append(out, e.r)
		}
	}
	w.deferred = nil
	return out
}

type pendingStatus struct {
	st     *directorv1.TaskStatus // the highest seq, without its log
	log    []string
	urgent bool
	tries  int // failed writes so far
}

func newSessionWriter(d *Director, s *liveSession) *sessionWriter {
	return &sessionWriter{d: d, s: s, statuses: map[string]*pendingStatus{}, kick: make(chan struct{}, 1),
		lastWrite: map[string]time.Time{}, lastPhase: map[string]directorv1.TaskPhase{}}
}

func (w *sessionWriter) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// status merges a status from the agent.
func (w *sessionWriter) status(st *directorv1.TaskStatus) {
	if st.GetTaskId() == "" || st.GetPhase() < directorv1.TaskPhase_TASK_PHASE_QUEUED ||
		st.GetPhase() > directorv1.TaskPhase_TASK_PHASE_CANCELLED {
		w.d.log.Debug("director: task status without id or phase: ignored", "node", w.s.node)
		return
	}
	w.mu.Lock()
	p := w.statuses[st.GetTaskId()]
	if p == nil {
		p = &pendingStatus{}
		w.statuses[st.GetTaskId()] = p
	}
	if p.st != nil && terminal(p.st.GetPhase()) {
		w.mu.Unlock()
		return // the first terminal phase wins, here as in the store
	}
	p.log = appendLog(p.log, st.GetLog())
	if p.st == nil || st.GetSeq() > p.st.GetSeq() {
		if p.st != nil && p.st.GetPhase() != st.GetPhase() {
			p.urgent = true
		}
		c := proto.Clone(st).(*directorv1.TaskStatus)
		c.Log = nil
		p.st = c
	}
	if p.st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_RUNNING || p.st.GetProgress() == nil {
		p.urgent = true
	}
	w.mu.Unlock()
	w.wake()
}

// taskData queues a chunk of bulk output; the agent sends at most a few
// before their acks.
func (w *sessionWriter) taskData(td *directorv1.TaskData) {
	w.mu.Lock()
	if len(w.data) >= maxPendingData {
		w.mu.Unlock()
		// More than the protocol allows in flight: not stored, not
		// acked (the agent's task fails on its own deadline).
		w.d.log.Warn("director: task data beyond the chunks allowed in flight: dropped", "node", w.s.node, "task", truncate(td.GetTaskId(), 64))
		return
	}
	w.data = append(w.data, td)
	w.mu.Unlock()
	w.wake()
}

// storeRetry is how soon a session's failed status or inventory write is
// tried again.
const storeRetry = time.Second

// maxStatusTries bounds the writes of one status (a minute of retries).
const maxStatusTries = 60

// maxPendingData bounds the chunks waiting to be stored per session; an
// agent has at most 4 un-acked per task.
const maxPendingData = 16

// inventory queues a snapshot of the node's inventory to be written.
func (w *sessionWriter) inventory(r *inventoryRecord) {
	w.mu.Lock()
	w.inv = r
	w.mu.Unlock()
	w.wake()
}

// run writes until done is closed, then writes what is left and returns.
func (w *sessionWriter) run(done <-chan struct{}) {
	ctx := w.d.bg
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		final := false
		select {
		case <-w.kick:
		case <-timer.C:
		case <-done:
			final = true
		case <-ctx.Done():
			return
		}
		next := w.flush(ctx, final)
		if final {
			return
		}
		if next > 0 {
			timer.Reset(next)
		}
	}
}

// flush writes what is pending and says when to come back for the
// progress held back (0: nothing held).
func (w *sessionWriter) flush(ctx context.Context, final bool) time.Duration {
	w.mu.Lock()
	data, inv := w.data, w.inv
	w.data, w.inv = nil, nil
	now := time.Now()
	var due []*pendingStatus
	var next time.Duration
	for id, p := range w.statuses {
		wait := progressEvery - now.Sub(w.lastWrite[id])
		if final || p.urgent || wait <= 0 || w.lastPhase[id] != p.st.GetPhase() {
			due = append(due, p)
			delete(w.statuses, id)
			continue
		}
		if next == 0 || wait < next {
			next = wait
		}
	}
	w.mu.Unlock()

	for _, td := range data {
		w.d.storeTaskData(ctx, w.s, td)
	}
	// A write that fails (etcd slow or without quorum) is kept and
	// tried again in storeRetry unless a newer one replaced it: dropped,
	// the store would show an old inventory or a task that never ends
	// until the node registers again. When the session ends, the next
	// one's Resync and the agent's resent statuses make up for it.
	retry := func() {
		if !final && (next == 0 || storeRetry < next) {
			next = storeRetry
		}
	}
	if inv != nil {
		if err := w.d.writeInventory(ctx, w.s.node, inv, !w.invOnce); err != nil {
			w.mu.Lock()
			if w.inv == nil {
				w.inv = inv
			}
			w.mu.Unlock()
			retry()
		} else {
			w.invOnce = true
		}
	}
	for _, p := range due {
		id := p.st.GetTaskId()
		w.lastWrite[id], w.lastPhase[id] = now, p.st.GetPhase()
		if err := w.d.writeStatus(ctx, w.s.node, p.st, p.log); err != nil {
			if p.tries++; p.tries >= maxStatusTries {
				// the agent sends it again after its next Registered
				w.d.log.Warn("director: write task status: given up", "node", w.s.node, "task", id, "tries", p.tries, "err", err)
			} else {
				w.d.log.Warn("director: write task status: retried", "node", w.s.node, "task", id, "err", err)
				w.mu.Lock()
				if cur := w.statuses[id]; cur == nil {
					p.urgent = true
					w.statuses[id] = p
				} else {
					cur.log, cur.urgent, cur.tries = append(p.log, cur.log...), true, p.tries
				}
				w.mu.Unlock()
				retry()
				continue
			}
		}
		if terminal(p.st.GetPhase()) {
			delete(w.lastWrite, id)
			delete(w.lastPhase, id)
		}
	}
	return next
}

// writeStatus stores an agent's status: kept when its seq is higher than
// the stored one's and the stored phase is not terminal yet (the first
// terminal phase wins). A terminal one also ends the task record (a
// create-vm's manifest dropped) in the same transaction.
func (d *Director) writeStatus(ctx context.Context, node string, st *directorv1.TaskStatus, log []string) error {
	id := st.GetTaskId()
	for attempt := 0; attempt < 5; attempt++ {
		var rec taskStatusRecord
		rev, err := d.store.Get(ctx, taskStatusKey(node, id), &rec)
		if notFound(err) {
			d.log.Info("director: status for a task not stored here: ignored", "node", node, "task", truncate(id, 64))
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case terminal(rec.phase()) && rec.ByDirector && terminal(st.GetPhase()):
			// the agent had the task after all: what it did is the truth
			d.log.Warn("director: the agent ended a task the director had ended: its outcome replaces the director's",
				"node", node, "task", id, "director", rec.Phase, "agent", st.GetPhase().String())
			rec.ByDirector = false
		case terminal(rec.phase()) || st.GetSeq() <= rec.Seq:
			return nil
		}
		now := d.now()
		if rec.Seq == 0 && rec.DispatchUs == 0 {
			rec.DispatchUs = max(1, now.Sub(time.UnixMicro(rec.Created)).Microseconds())
		}
		rec.Seq, rec.Phase, rec.Status = st.GetSeq(), st.GetPhase().String(), marshalProto(st)
		rec.Log = appendLog(rec.Log, log)
		rec.UpdatedAt, rec.Replica = ms(now), d.replicaID
		txn := d.txn()
		txn.IfRev(taskStatusKey(node, id), rev).Put(taskStatusKey(node, id), &rec, d.taskTTL(rec.Deadline, terminal(st.GetPhase())))
		if terminal(st.GetPhase()) {
			if err := d.endTaskRecord(ctx, txn, node, id); err != nil {
				return err
			}
		}
		ok, err := txn.commit(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
	}
	return errors.New("the task's records kept changing")
}

// endTaskRecord adds to txn the task record's end: Ended, a create-vm's
// manifest dropped. Absent: nothing to do.
func (d *Director) endTaskRecord(ctx context.Context, txn *txn, node, id string) error {
	var r taskRecord
	rev, err := d.store.Get(ctx, taskKey(node, id), &r)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if stripManifest(&r) {
		txn.IfRev(taskKey(node, id), rev).Put(taskKey(node, id), &r, d.opts.TaskRetention)
	}
	return nil
}

// finishTask ends a task on the director's word (cancelled while
// pending, not delivered before its deadline) unless it ended already;
// it returns the task as it stands.
func (d *Director) finishTask(ctx context.Context, node, id string, phase directorv1.TaskPhase, f *directorv1.TaskFailure, onlyPending bool, mutate func(*taskRecord) bool) (*directorv1.TaskInfo, error) {
	for attempt := 0; attempt < 5; attempt++ {
		r, rrev, s, srev, err := d.getTask(ctx, node, id)
		if err != nil {
			return nil, err
		}
		if s == nil {
			s = &taskStatusRecord{V: recordVersion, Kind: r.Kind, Phase: directorv1.TaskPhase_TASK_PHASE_PENDING.String(),
				Created: r.CreatedAt * 1000, Deadline: r.Deadline}
		}
		txn := d.txn()
		changed := mutate != nil && mutate(r)
		end := !terminal(s.phase()) && (!onlyPending || s.phase() == directorv1.TaskPhase_TASK_PHASE_PENDING)
		if end {
			now := d.now()
			s.Phase, s.ByDirector = phase.String(), true
			s.Status = marshalProto(&directorv1.TaskStatus{TaskId: id, Seq: s.Seq, Phase: phase, Failure: f})
			s.UpdatedAt, s.Replica = ms(now), d.replicaID
			txn.IfRev(taskStatusKey(node, id), srev).Put(taskStatusKey(node, id), s, d.opts.TaskRetention)
		}
		if terminal(s.phase()) && stripManifest(r) {
			changed = true
		}
		if !end && !changed {
			return taskInfo(r, s), nil
		}
		if changed {
			txn.IfRev(taskKey(node, id), rrev).Put(taskKey(node, id), r, d.taskTTL(r.Deadline, terminal(s.phase())))
		}
		ok, err := txn.commit(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			return taskInfo(r, s), nil
		}
	}
	return nil, errors.New("the task's records kept changing")
}

// storeTaskData stores a chunk of a task's bulk output under
// taskdata/<node>/<task>/<offset> and acks it. A chunk for a task that is
// not a running collect-diagnostics of this node, out of bounds or too
// big is not stored and not acked: the agent's task fails on its own
// deadline.
func (d *Director) storeTaskData(ctx context.Context, s *liveSession, td *directorv1.TaskData) {
	id := td.GetTaskId()
	var st taskStatusRecord
	if _, err := d.store.Get(ctx, taskStatusKey(s.node, id), &st); err != nil {
		d.log.Info("director: task data for a task not stored here: dropped", "node", s.node, "task", truncate(id, 64), "err", err)
		return
	}
	end := td.GetOffset() + uint64(len(td.GetData()))
	switch {
	case st.Kind != KindCollectDiagnostics || terminal(st.phase()):
		d.log.Info("director: task data for a task that takes none: dropped", "node", s.node, "task", id)
		return
	case len(td.GetData()) > maxTaskDataChunk || end > MaxTaskData:
		d.log.Warn("director: task data out of bounds: dropped", "node", s.node, "task", id,
			"offset", td.GetOffset(), "bytes", len(td.GetData()))
		return
	}
	key := fmt.Sprintf("%s%016x", taskDataPrefix(s.node, id), td.GetOffset())
	if err := d.store.Put(ctx, key, taskDataRecord{V: recordVersion, Data: td.GetData(), Last: td.GetLast()}, taskDataTTL); err != nil {
		d.log.Warn("director: store task data: not acked", "node", s.node, "task", id, "err", err)
		return
	}
	s.enqueue(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_TaskDataAck{
		TaskDataAck: &directorv1.TaskDataAck{TaskId: id, Offset: end}}})
}

// notDeliveredGrace is how long after its deadline a task still pending
// is failed NOT_DELIVERED: a task sent just in time whose agent's first
// status is still on its way (etcd slow) must not be called undelivered
// while the agent has it.
const notDeliveredGrace = 10 * time.Second

// taskSweepLoop ends pending tasks whose deadline passed (NOT_DELIVERED)
// and makes sure every ended task's record is ended (its manifest
// dropped), every TaskSweepEvery.
func (d *Director) taskSweepLoop(ctx context.Context) {
	tick := time.NewTicker(d.opts.TaskSweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := d.sweepTasks(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("director: task sweep", "err", err)
		}
	}
}

func (d *Director) sweepTasks(ctx context.Context) error {
	type item struct{ node, id string }
	var late, ended []item
	now := d.now()
	err := d.store.List(ctx, preTaskStatus, func(key string, _ int64, raw []byte) error {
		var s taskStatusRecord
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		node, id, ok := strings.Cut(strings.TrimPrefix(key, preTaskStatus), "/")
		if !ok {
			return nil
		}
		switch {
		case s.phase() == directorv1.TaskPhase_TASK_PHASE_PENDING && now.After(fromMS(s.Deadline).Add(notDeliveredGrace)):
			late = append(late, item{node, id})
		case terminal(s.phase()) && s.Kind == KindCreateVM:
			ended = append(ended, item{node, id})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, it := range late {
		f := &directorv1.TaskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_NOT_DELIVERED,
			Message: "the node did not take the task before its deadline"}
		if _, err := d.finishTask(ctx, it.node, it.id, directorv1.TaskPhase_TASK_PHASE_FAILED, f, true, nil); err != nil && !notFound(err) {
			return fmt.Errorf("task %s: %w", it.id, err)
		}
		d.log.Info("task not delivered before its deadline", "node", it.node, "task", it.id)
	}
	for _, it := range ended {
		var r taskRecord
		rev, err := d.store.Get(ctx, taskKey(it.node, it.id), &r)
		if err != nil || (r.Stripped && r.Ended) {
			continue
		}
		if stripManifest(&r) {
			if _, err := d.store.Txn().IfRev(taskKey(it.node, it.id), rev).Put(taskKey(it.node, it.id), &r, d.opts.TaskRetention).Commit(ctx); err != nil {
				return fmt.Errorf("task %s: drop manifest: %w", it.id, err)
			}
		}
	}
	return nil
}
