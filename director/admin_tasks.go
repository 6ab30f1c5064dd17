package director

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/virtcon/virtcon/api/directorv1"
)

// unavailable is a store failure as the admin API answers it.
func unavailable(what string, err error) error {
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s: the store (etcd) did not answer: %w", what, err))
}

// CreateTask stores a task for a node; the replica holding the node's
// session sends it. A retry with the same id and the same task answers
// the stored task; the same id with another task is AlreadyExists.
func (a *adminService) CreateTask(ctx context.Context, req *connect.Request[directorv1.CreateTaskRequest]) (*connect.Response[directorv1.CreateTaskResponse], error) {
	d := a.d
	t := req.Msg.GetTask()
	summary, err := checkTask(t)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	n, err := d.findNode(ctx, req.Msg.GetNode())
	if err != nil {
		return nil, err
	}
	kind := taskKind(t)
	switch {
	case n.revoked():
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("node %s (%s) is revoked (%s)", n.ID, n.Host.Hostname, n.RevokeReason))
	case len(n.TaskKinds) == 0:
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("node %s (%s) runs no tasks: its agent predates tasks (or has not registered since it was updated)", n.ID, n.Host.Hostname))
	case !slices.Contains(n.TaskKinds, kind):
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("node %s (%s) does not run %s tasks: it runs %s", n.ID, n.Host.Hostname, kind, strings.Join(n.TaskKinds, ", ")))
	}
	who := adminActor(ctx)
	now := d.now()
	deadlineIn := time.Duration(t.GetDeadlineInMs()) * time.Millisecond
	if deadlineIn == 0 {
		deadlineIn = defaultDeadline(t)
	}
	rec := &taskRecord{
		V: recordVersion, ID: t.GetId(), Node: n.ID, Hostname: n.Host.Hostname, Kind: kind, Summary: summary,
		Task: marshalProto(t), CreatedAt: ms(now), CreatedBy: who.name, Deadline: ms(now.Add(deadlineIn)),
	}
	if cv := t.GetCreateVm(); cv != nil {
		sum := sha256.Sum256(cv.GetManifest())
		rec.ManifestSHA256 = hex.EncodeToString(sum[:])
	}
	st := &taskStatusRecord{V: recordVersion, Kind: kind, Phase: directorv1.TaskPhase_TASK_PHASE_PENDING.String(),
		Created: now.UnixMicro(), Deadline: rec.Deadline, UpdatedAt: ms(now)}
	// the records while the task may be live (renewed as it goes); the id
	// as long as the records once ended
	ret := d.taskTTL(rec.Deadline, false)
	txn := d.txn()
	txn.IfAbsent(taskIDKey(rec.ID)).
		Put(taskIDKey(rec.ID), taskIDRecord{V: recordVersion, Node: n.ID}, d.taskLive(rec.Deadline)+d.opts.TaskRetention).
		Put(taskKey(n.ID, rec.ID), rec, ret).
		Put(taskStatusKey(n.ID, rec.ID), st, ret)
	txn.audit(now, auditRecord{Kind: "task.create", NodeID: n.ID, Source: who.source, Actor: who.name,
		Detail: "task " + rec.ID + ": " + summary})
	ok, err := txn.commit(ctx)
	if err != nil {
		return nil, unavailable("store the task (it may or may not be stored: GetTask "+rec.ID+")", err)
	}
	if ok {
		return connect.NewResponse(&directorv1.CreateTaskResponse{Task: taskInfo(rec, st)}), nil
	}
	// The id is taken: a retry of this very task, or another task.
	node, err := d.taskNode(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	old, _, ost, _, err := d.getTask(ctx, node, rec.ID)
	if err != nil {
		if notFound(err) {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("task id %s: taken (its task has expired)", rec.ID))
		}
		return nil, unavailable("read task "+rec.ID, err)
	}
	if !sameTask(old, n.ID, t) {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("task id %s: taken by another task (%s on %s)", rec.ID, old.Summary, old.Hostname))
	}
	return connect.NewResponse(&directorv1.CreateTaskResponse{Task: taskInfo(old, ost)}), nil
}

// taskNode is the node a task id is for.
func (d *Director) taskNode(ctx context.Context, id string) (string, error) {
	var r taskIDRecord
	if _, err := d.store.Get(ctx, taskIDKey(id), &r); err != nil {
		if notFound(err) {
			return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s: no such task", id))
		}
		return "", unavailable("read task "+id, err)
	}
	return r.Node, nil
}

var errStopList = errors.New("enough")

// resolveTask is the (node, id) of a task named by its id or a unique
// prefix of at least 4 characters.
func (d *Director) resolveTask(ctx context.Context, id string) (string, string, error) {
	id = strings.ToLower(strings.TrimSpace(id))
	if len(id) < 4 {
		return "", "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("task id %q: want the id or at least its first 4 characters", id))
	}
	if strings.ContainsAny(id, "/\x00") {
		return "", "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("task id %q: want a UUID or its start", truncate(id, 64)))
	}
	if _, err := uuid.Parse(id); err == nil && len(id) == 36 {
		node, err := d.taskNode(ctx, id)
		return node, id, err
	}
	type hit struct{ node, id string }
	var hits []hit
	err := d.store.List(ctx, preTaskIDs+id, func(key string, _ int64, raw []byte) error {
		var r taskIDRecord
		if json.Unmarshal(raw, &r) == nil {
			hits = append(hits, hit{r.Node, strings.TrimPrefix(key, preTaskIDs)})
		}
		if len(hits) > 1 {
			return errStopList
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopList) {
		return "", "", unavailable("find task "+id, err)
	}
	switch len(hits) {
	case 0:
		return "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s: no such task", id))
	case 1:
		return hits[0].node, hits[0].id, nil
	}
	return "", "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("task id prefix %q names more than one task: give more of it", id))
}

func (d *Director) taskInfoOf(ctx context.Context, node, id string) (*directorv1.TaskInfo, error) {
	r, _, s, _, err := d.getTask(ctx, node, id)
	if notFound(err) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s: no such task", id))
	}
	if err != nil {
		return nil, unavailable("read task "+id, err)
	}
	return taskInfo(r, s), nil
}

// GetTask is one task by its id or a unique prefix of it.
func (a *adminService) GetTask(ctx context.Context, req *connect.Request[directorv1.GetTaskRequest]) (*connect.Response[directorv1.GetTaskResponse], error) {
	node, id, err := a.d.resolveTask(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	ti, err := a.d.taskInfoOf(ctx, node, id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&directorv1.GetTaskResponse{Task: ti}), nil
}

// ListTasks lists the tasks (of one node, in some phases), oldest first;
// limit keeps the newest.
func (a *adminService) ListTasks(ctx context.Context, req *connect.Request[directorv1.ListTasksRequest]) (*connect.Response[directorv1.ListTasksResponse], error) {
	d := a.d
	prefix := ""
	if req.Msg.GetNode() != "" {
		n, err := d.findNode(ctx, req.Msg.GetNode())
		if err != nil {
			return nil, err
		}
		prefix = n.ID + "/"
	}
	statuses := map[string]*taskStatusRecord{}
	err := d.store.List(ctx, preTaskStatus+prefix, func(key string, _ int64, raw []byte) error {
		var s taskStatusRecord
		if json.Unmarshal(raw, &s) == nil {
			statuses[strings.TrimPrefix(key, preTaskStatus)] = &s
		}
		return nil
	})
	if err != nil {
		return nil, unavailable("list tasks", err)
	}
	var out []*directorv1.TaskInfo
	err = d.store.List(ctx, preTasks+prefix, func(key string, _ int64, raw []byte) error {
		var r taskRecord
		if json.Unmarshal(raw, &r) != nil {
			return nil
		}
		ti := taskInfo(&r, statuses[strings.TrimPrefix(key, preTasks)])
		if len(req.Msg.GetPhases()) > 0 && !slices.Contains(req.Msg.GetPhases(), ti.Phase) {
			return nil
		}
		out = append(out, ti)
		return nil
	})
	if err != nil {
		return nil, unavailable("list tasks", err)
	}
	slices.SortStableFunc(out, func(a, b *directorv1.TaskInfo) int {
		return cmp.Or(cmp.Compare(a.CreatedAtUnixMs, b.CreatedAtUnixMs), cmp.Compare(a.Id, b.Id))
	})
	if l := int(req.Msg.GetLimit()); l > 0 && len(out) > l {
		out = out[len(out)-l:]
	}
	return connect.NewResponse(&directorv1.ListTasksResponse{Tasks: out}), nil
}

// CancelTask asks for a task's cancellation: a pending one (no word from
// its agent yet) ends Cancelled at once; either way the holder of the
// node's session sends CancelTask (the task may be on its way).
func (a *adminService) CancelTask(ctx context.Context, req *connect.Request[directorv1.CancelTaskRequest]) (*connect.Response[directorv1.CancelTaskResponse], error) {
	d := a.d
	node, id, err := d.resolveTask(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	who := adminActor(ctx)
	var asked bool
	ti, err := d.finishTask(ctx, node, id, directorv1.TaskPhase_TASK_PHASE_CANCELLED, nil, true, func(r *taskRecord) bool {
		asked = !r.CancelRequested && !r.Ended
		if asked {
			r.CancelRequested = true
		}
		return asked
	})
	if notFound(err) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s: no such task", id))
	}
	if err != nil {
		return nil, unavailable("cancel task "+id, err)
	}
	if asked {
		d.audit(ctx, auditRecord{Kind: "task.cancel", NodeID: node, Source: who.source, Actor: who.name, Detail: "task " + id})
	}
	return connect.NewResponse(&directorv1.CancelTaskResponse{Task: ti}), nil
}

// WatchTask streams the task at every change until it is terminal. It
// may be opened before the task exists: it waits for it then.
func (a *adminService) WatchTask(ctx context.Context, req *connect.Request[directorv1.WatchTaskRequest], stream *connect.ServerStream[directorv1.TaskInfo]) error {
	d := a.d
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	want := strings.ToLower(strings.TrimSpace(req.Msg.GetId()))
	rev, err := d.currentRev(ctx, preTaskIDs)
	if err != nil {
		return unavailable("watch task", err)
	}
	node, id, err := d.resolveTask(ctx, want)
	if connect.CodeOf(err) == connect.CodeNotFound {
		if u, perr := uuid.Parse(want); perr != nil || u.String() != want {
			return err // only a whole id can be waited for
		}
		// The headers go out now: a caller that waits for them before
		// it creates the task misses nothing.
		if err := stream.Send(nil); err != nil {
			return nil
		}
		// Not created yet: wait for its id record.
		for ev := range d.store.Watch(ctx, taskIDKey(want), rev+1) {
			if ev.Status() || ev.Deleted || ev.Key != taskIDKey(want) {
				continue
			}
			var r taskIDRecord
			if json.Unmarshal(ev.Raw, &r) == nil {
				node, id, err, rev = r.Node, want, nil, ev.Rev
				break
			}
		}
		if node == "" {
			return ctx.Err()
		}
	} else if err == nil {
		if rev, err = d.currentRev(ctx, preTasks); err != nil {
			return unavailable("watch task", err)
		}
	}
	if err != nil {
		return err
	}
	type change struct {
		key string
		raw []byte
	}
	changes := make(chan change, 64)
	for _, k := range []string{taskKey(node, id), taskStatusKey(node, id)} {
		go func(k string) {
			for ev := range d.store.Watch(ctx, k, rev+1) {
				if ev.Key != k || ev.Status() || ev.Deleted {
					continue
				}
				select {
				case changes <- change{k, ev.Raw}:
				case <-ctx.Done():
					return
				}
			}
		}(k)
	}
	// The task at rev, then every change of its two records after it
	// (the watches start first: their setup overlaps the reads).
	var r taskRecord
	var st *taskStatusRecord
	for _, k := range []string{taskKey(node, id), taskStatusKey(node, id)} {
		resp, err := d.store.Client().Get(ctx, d.store.Prefix()+k, clientv3.WithRev(rev))
		if err != nil {
			return unavailable("watch task", err)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		if k == taskKey(node, id) {
			err = json.Unmarshal(resp.Kvs[0].Value, &r)
		} else {
			st = &taskStatusRecord{}
			err = json.Unmarshal(resp.Kvs[0].Value, st)
		}
		if err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("task %s: unreadable record", id))
		}
	}
	if r.ID == "" {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s: no such task", id))
	}
	var last *directorv1.TaskInfo
	for {
		ti := taskInfo(&r, st)
		if last == nil || !proto.Equal(last, ti) {
			if err := stream.Send(ti); err != nil {
				return nil
			}
			last = ti
		}
		if terminal(ti.GetPhase()) {
			return nil
		}
		var c change
		select {
		case <-ctx.Done():
			return nil
		case c = <-changes:
		}
		if c.key == taskKey(node, id) {
			var nr taskRecord
			if json.Unmarshal(c.raw, &nr) == nil {
				r = nr
			}
		} else {
			var ns taskStatusRecord
			if json.Unmarshal(c.raw, &ns) == nil {
				st = &ns
			}
		}
	}
}

// GetTaskData streams a task's bulk output as stored, in order.
func (a *adminService) GetTaskData(ctx context.Context, req *connect.Request[directorv1.GetTaskDataRequest], stream *connect.ServerStream[directorv1.TaskDataChunk]) error {
	d := a.d
	node, id, err := d.resolveTask(ctx, req.Msg.GetId())
	if err != nil {
		return err
	}
	var next uint64
	err = d.store.List(ctx, taskDataPrefix(node, id), func(key string, _ int64, raw []byte) error {
		var c taskDataRecord
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("chunk %s: %w", key, err)
		}
		var off uint64
		if _, err := fmt.Sscanf(key[strings.LastIndexByte(key, '/')+1:], "%016x", &off); err != nil || off != next {
			return fmt.Errorf("chunk at %d missing", next)
		}
		next = off + uint64(len(c.Data))
		return stream.Send(&directorv1.TaskDataChunk{Offset: off, Data: c.Data})
	})
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("task %s: data: %w", id, err))
	}
	return nil
}

// ListVMs lists the VMs of every node (or one), from the nodes'
// inventories, falling back to their last host reports.
func (a *adminService) ListVMs(ctx context.Context, req *connect.Request[directorv1.ListVMsRequest]) (*connect.Response[directorv1.ListVMsResponse], error) {
	d := a.d
	var nodes []*nodeRecord
	if req.Msg.GetNode() != "" {
		n, err := d.findNode(ctx, req.Msg.GetNode())
		if err != nil {
			return nil, err
		}
		nodes = []*nodeRecord{n}
	} else {
		var err error
		if nodes, err = d.listNodes(ctx); err != nil {
			return nil, unavailable("list nodes", err)
		}
	}
	invs := map[string]*inventoryRecord{}
	prefix := preInventory
	if len(nodes) == 1 {
		prefix += nodes[0].ID
	}
	err := d.store.List(ctx, prefix, func(key string, _ int64, raw []byte) error {
		var r inventoryRecord
		if json.Unmarshal(raw, &r) == nil {
			invs[strings.TrimPrefix(key, preInventory)] = &r
		}
		return nil
	})
	if err != nil {
		return nil, unavailable("list inventories", err)
	}
	resp := &directorv1.ListVMsResponse{}
	for _, n := range nodes {
		inv := invs[n.ID]
		if inv == nil && !n.revoked() {
			resp.NodesWithoutInventory = append(resp.NodesWithoutInventory, n.ID)
		}
		if req.Msg.GetCountOnly() && inv != nil {
			resp.Count += uint32(len(inv.VMs))
			continue
		}
		d.mu.Lock()
		rep := d.reports[n.ID]
		d.mu.Unlock()
		vms := nodeVMs(d.nodeInfo(n), inv, rep)
		resp.Count += uint32(len(vms))
		if !req.Msg.GetCountOnly() {
			resp.Vms = append(resp.Vms, vms...)
		}
	}
	slices.SortStableFunc(resp.Vms, func(a, b *directorv1.NodeVM) int {
		return cmp.Or(cmp.Compare(a.NodeHostname, b.NodeHostname), cmp.Compare(a.NodeId, b.NodeId),
			cmp.Compare(a.Name, b.Name), cmp.Compare(a.Uid, b.Uid))
	})
	slices.Sort(resp.NodesWithoutInventory)
	return connect.NewResponse(resp), nil
}

// ResyncNode asks a node, or every connected one, for a full inventory:
// it writes resync/<node>, which the replica holding the session sends.
func (a *adminService) ResyncNode(ctx context.Context, req *connect.Request[directorv1.ResyncNodeRequest]) (*connect.Response[directorv1.ResyncNodeResponse], error) {
	d := a.d
	var ids []string
	switch {
	case req.Msg.GetAll() && req.Msg.GetId() != "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("give a node or all, not both"))
	case req.Msg.GetAll():
		// every connected node, whichever replica holds its session
		// (sessions/), and this replica's own
		seen := map[string]bool{}
		err := d.store.List(ctx, preSessions, func(key string, _ int64, _ []byte) error {
			seen[strings.TrimPrefix(key, preSessions)] = true
			return nil
		})
		if err != nil {
			return nil, unavailable("list the connected nodes", err)
		}
		d.mu.Lock()
		for id := range d.sessions {
			seen[id] = true
		}
		d.mu.Unlock()
		for id := range seen {
			ids = append(ids, id)
		}
		slices.Sort(ids)
	default:
		n, err := d.findNode(ctx, req.Msg.GetId())
		if err != nil {
			return nil, err
		}
		if n.revoked() {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s (%s) is revoked", n.ID, n.Host.Hostname))
		}
		ids = []string{n.ID}
	}
	who := adminActor(ctx)
	now := d.now()
	for chunk := range slices.Chunk(ids, 100) {
		txn := d.store.Txn()
		for _, id := range chunk {
			txn.Put(preResync+id, resyncRecord{V: recordVersion, ID: uuid.NewString(), At: ms(now), By: who.name}, resyncTTL)
		}
		if _, err := txn.Commit(ctx); err != nil {
			return nil, unavailable("ask for a resync", err)
		}
	}
	return connect.NewResponse(&directorv1.ResyncNodeResponse{Nodes: ids}), nil
}

// ListReplicas lists the live director replicas (replicas/), this one
// first (see replicaInfos).
func (a *adminService) ListReplicas(ctx context.Context, _ *connect.Request[directorv1.ListReplicasRequest]) (*connect.Response[directorv1.ListReplicasResponse], error) {
	return connect.NewResponse(&directorv1.ListReplicasResponse{Replicas: a.d.replicaInfos(ctx)}), nil
}
