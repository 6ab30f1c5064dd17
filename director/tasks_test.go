package director_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
)

// allKinds is what a full agent advertises.
var allKinds = []string{"create-vm", "start-vm", "stop-vm", "reboot-vm", "delete-vm", "pull-image", "apply-network", "collect-diagnostics"}

// taskAgent is a scripted agent: a real session over TLS whose incoming
// messages land in a channel.
type taskAgent struct {
	t     testing.TB
	h     *directortest.Harness
	node  string
	agent directorv1connect.AgentServiceClient
	kinds []string
	s     *session
	in    chan *directorv1.SessionResponse
}

// newTaskAgent enrols a node and opens its session, advertising kinds.
func newTaskAgent(t testing.TB, h *directortest.Harness, kinds ...string) *taskAgent {
	t.Helper()
	node, cert := h.Enroll(t, nil)
	agent, hc := h.AgentClient(cert)
	t.Cleanup(hc.CloseIdleConnections)
	a := &taskAgent{t: t, h: h, node: node, agent: agent, kinds: kinds}
	a.connect()
	return a
}

// connect opens a (new) session: Register, Registered, Resync.
func (a *taskAgent) connect() *directorv1.Resync {
	a.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a.t.Cleanup(cancel)
	s := &session{t: a.t, stream: a.agent.Session(ctx), cancel: cancel}
	if err := s.stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Register{Register: &directorv1.Register{
		NodeId: a.node, Host: &directorv1.HostFacts{Hostname: "host-t", AgentVersion: "test"}, TaskKinds: a.kinds,
	}}}); err != nil {
		a.t.Fatalf("send Register: %v", err)
	}
	m, err := s.stream.Receive()
	if err != nil || m.GetRegistered() == nil {
		a.t.Fatalf("first answer %v (%v), want Registered", m, err)
	}
	if reg := m.GetRegistered(); reg.GetReplicaId() == "" || len(reg.GetDirectors()) != 1 {
		a.t.Errorf("Registered %v: want a replica id and this replica's address", reg)
	}
	// The Resync comes after Registered; the node's pending tasks, sent
	// by the Register listing or the tasks watch, may come before it.
	a.in = make(chan *directorv1.SessionResponse, 100)
	for {
		m, err = s.stream.Receive()
		if err != nil {
			a.t.Fatalf("after Registered: %v, want Resync{reason: register}", err)
		}
		if m.GetResync() != nil {
			break
		}
		if m.GetTask() == nil && m.GetDirectors() == nil {
			a.t.Fatalf("after Registered: %v, want Resync{reason: register} (or a task)", m)
		}
		if m.GetTask() != nil {
			a.in <- m
		}
	}
	if m.GetResync().GetReason() != director.ResyncRegister {
		a.t.Fatalf("Resync %v, want reason register", m.GetResync())
	}
	a.s = s
	go func(in chan *directorv1.SessionResponse) {
		defer close(in)
		for {
			m, err := s.stream.Receive()
			if err != nil {
				return
			}
			if m.GetDirectors() != nil {
				continue // the replicas' addresses, pushed when they change: not under test here
			}
			in <- m
		}
	}(a.in)
	return m.GetResync()
}

// disconnect ends the session from the agent's side.
func (a *taskAgent) disconnect() {
	a.s.stream.CloseRequest()
	a.s.cancel()
	for range a.in {
	}
}

// next is the next message from the director (within 5 s).
func (a *taskAgent) next() *directorv1.SessionResponse {
	a.t.Helper()
	select {
	case m, ok := <-a.in:
		if !ok {
			a.t.Fatal("the session ended")
		}
		return m
	case <-time.After(5 * time.Second):
		a.t.Fatal("no message from the director within 5 s")
	}
	return nil
}

// quiet fails if the director sends anything within d.
func (a *taskAgent) quiet(d time.Duration) {
	a.t.Helper()
	select {
	case m, ok := <-a.in:
		if ok {
			a.t.Errorf("the director sent %v, want nothing", m)
		}
	case <-time.After(d):
	}
}

func (a *taskAgent) send(m *directorv1.SessionRequest) {
	a.t.Helper()
	if err := a.s.stream.Send(m); err != nil {
		a.t.Fatalf("send: %v", err)
	}
}

func (a *taskAgent) status(st *directorv1.TaskStatus) {
	a.t.Helper()
	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskStatus{TaskStatus: st}})
}

func startTask(vm string) *directorv1.Task {
	return &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_StartVm{StartVm: &directorv1.StartVM{Vm: vm}}}
}

func createTask(t testing.TB, h *directortest.Harness, node string, task *directorv1.Task) *directorv1.TaskInfo {
	t.Helper()
	resp, err := h.Admin.CreateTask(context.Background(), connect.NewRequest(&directorv1.CreateTaskRequest{Node: node, Task: task}))
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	return resp.Msg.GetTask()
}

func getTask(t testing.TB, h *directortest.Harness, id string) *directorv1.TaskInfo {
	t.Helper()
	resp, err := h.Admin.GetTask(context.Background(), connect.NewRequest(&directorv1.GetTaskRequest{Id: id}))
	if err != nil {
		t.Fatalf("GetTask %s: %v", id, err)
	}
	return resp.Msg.GetTask()
}

// waitPhase polls the task until it is in phase.
func waitPhase(t testing.TB, h *directortest.Harness, id string, phase directorv1.TaskPhase) *directorv1.TaskInfo {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ti := getTask(t, h, id)
		if ti.GetPhase() == phase {
			return ti
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: %s after 5 s, want %s", id, ti.GetPhase(), phase)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// progressEvery is how often the director writes progress-only statuses.
const progressEvery = 500 * time.Millisecond

const (
	pending   = directorv1.TaskPhase_TASK_PHASE_PENDING
	queued    = directorv1.TaskPhase_TASK_PHASE_QUEUED
	running   = directorv1.TaskPhase_TASK_PHASE_RUNNING
	succeeded = directorv1.TaskPhase_TASK_PHASE_SUCCEEDED
	failed    = directorv1.TaskPhase_TASK_PHASE_FAILED
	cancelled = directorv1.TaskPhase_TASK_PHASE_CANCELLED
)

// A task goes from CreateTask to the agent and its statuses back, as
// WatchTask (opened before the task exists) and GetTask show them.
func TestTaskCreateDispatchSucceeded(t *testing.T) {
	h := directortest.Start(t)
	a := newTaskAgent(t, h, allKinds...)
	task := startTask("web")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch, err := h.Admin.WatchTask(ctx, connect.NewRequest(&directorv1.WatchTaskRequest{Id: task.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan []directorv1.TaskPhase, 1)
	go func() {
		var ph []directorv1.TaskPhase
		for watch.Receive() {
			if n := len(ph); n == 0 || ph[n-1] != watch.Msg().GetPhase() {
				ph = append(ph, watch.Msg().GetPhase())
			}
		}
		watched <- ph
	}()
	time.Sleep(100 * time.Millisecond) // the watch waits for the task

	ti := createTask(t, h, a.node, task)
	if ti.GetPhase() != pending || ti.GetKind() != "start-vm" || ti.GetSummary() != "start-vm web" || ti.GetNodeId() != a.node {
		t.Errorf("created %v, want Pending start-vm \"start-vm web\" on %s", ti, a.node)
	}
	if d := time.Duration(ti.GetDeadlineUnixMs()-ti.GetCreatedAtUnixMs()) * time.Millisecond; d != 5*time.Minute {
		t.Errorf("deadline %s after creation, want the kind's default 5m", d)
	}
	m := a.next()
	got := m.GetTask()
	if got.GetId() != task.GetId() || got.GetStartVm().GetVm() != "web" {
		t.Fatalf("agent got %v, want the task", m)
	}
	if got.GetDeadlineInMs() <= 0 || got.GetDeadlineInMs() > (5*time.Minute).Milliseconds() {
		t.Errorf("deadline_in_ms %d, want (0, 5m]", got.GetDeadlineInMs())
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: queued})
	waitPhase(t, h, task.GetId(), queued)
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 2, Phase: running, Log: []string{"starting web"}})
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 3, Phase: succeeded, Log: []string{"web running"},
		Result: &directorv1.TaskResult{Result: &directorv1.TaskResult_Vm{Vm: &directorv1.VMResult{Name: "web", Phase: "Running"}}}})
	// Late and out of order: the first terminal phase and the highest seq win.
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 2, Phase: running})
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 4, Phase: failed})
	waitPhase(t, h, task.GetId(), succeeded)
	time.Sleep(100 * time.Millisecond)
	ti = getTask(t, h, task.GetId()[:8]) // by a prefix
	if ti.GetPhase() != succeeded || ti.GetResult().GetVm().GetName() != "web" {
		t.Errorf("task %v, want Succeeded with its result", ti)
	}
	if strings.Join(ti.GetLog(), "|") != "starting web|web running" {
		t.Errorf("log %q, want both lines", ti.GetLog())
	}
	if ti.GetDispatchUs() <= 0 || ti.GetReplicaId() != h.D.ReplicaID() {
		t.Errorf("dispatch_us %d replica %q, want > 0 and %q", ti.GetDispatchUs(), ti.GetReplicaId(), h.D.ReplicaID())
	}
	select {
	case ph := <-watched:
		want := []directorv1.TaskPhase{pending, queued, succeeded}
		if len(ph) < 3 || ph[0] != pending || ph[len(ph)-1] != succeeded {
			t.Errorf("WatchTask saw %v, want %v (running may be merged)", ph, want)
		}
	case <-time.After(5 * time.Second):
		t.Error("WatchTask did not end after the terminal phase")
	}
	if h.AuditKinds(t)["task.create"] != 1 {
		t.Error("no task.create audit entry")
	}

	// A retry with the same id and task answers the stored task; the
	// same id with another task is refused.
	again := createTask(t, h, a.node, task)
	if again.GetPhase() != succeeded {
		t.Errorf("retried CreateTask: %s, want the stored Succeeded", again.GetPhase())
	}
	other := startTask("db")
	other.Id = task.GetId()
	_, err = h.Admin.CreateTask(context.Background(), connect.NewRequest(&directorv1.CreateTaskRequest{Node: a.node, Task: other}))
	wantCode(t, err, connect.CodeAlreadyExists)
	a.quiet(200 * time.Millisecond) // nothing sent again

	list, err := h.Admin.ListTasks(context.Background(), connect.NewRequest(&directorv1.ListTasksRequest{Node: a.node}))
	if err != nil || len(list.Msg.GetTasks()) != 1 {
		t.Errorf("ListTasks: %v %v, want the one task", list, err)
	}
}

// A task created while its node is away is sent when it registers, and
// again on every Register while it is not terminal; never after.
func TestPendingOnRegister(t *testing.T) {
	h := directortest.Start(t)
	a := newTaskAgent(t, h, allKinds...)
	a.disconnect()
	task := startTask("web")
	createTask(t, h, a.node, task)

	a.connect()
	if got := a.next().GetTask(); got.GetId() != task.GetId() {
		t.Fatalf("after Register the agent got %v, want the pending task", got)
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: queued})
	waitPhase(t, h, task.GetId(), queued)
	a.disconnect()

	a.connect()
	if got := a.next().GetTask(); got.GetId() != task.GetId() {
		t.Fatalf("after a reconnect the agent got %v, want the queued task again", got)
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 2, Phase: succeeded})
	waitPhase(t, h, task.GetId(), succeeded)
	a.disconnect()

	a.connect()
	a.quiet(300 * time.Millisecond)
}

// Cancelling a pending task ends it at once (and it is never sent); a
// running one gets CancelTask and ends when its agent says so.
func TestCancelTask(t *testing.T) {
	h := directortest.Start(t)
	a := newTaskAgent(t, h, allKinds...)
	a.disconnect()
	ctx := context.Background()

	p := startTask("idle")
	createTask(t, h, a.node, p)
	resp, err := h.Admin.CancelTask(ctx, connect.NewRequest(&directorv1.CancelTaskRequest{Id: p.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	if ti := resp.Msg.GetTask(); ti.GetPhase() != cancelled || !ti.GetCancelRequested() {
		t.Errorf("cancelled pending task: %v, want Cancelled at once", ti)
	}
	a.connect()
	// The CancelTask for a task this session never got is harmless; the
	// task itself is never sent.
	for {
		select {
		case m := <-a.in:
			if m.GetTask() != nil {
				t.Fatalf("a cancelled task was sent: %v", m)
			}
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}

	r := startTask("busy")
	createTask(t, h, a.node, r)
	if got := a.next().GetTask(); got.GetId() != r.GetId() {
		t.Fatalf("agent got %v, want the task", got)
	}
	a.status(&directorv1.TaskStatus{TaskId: r.GetId(), Seq: 1, Phase: running})
	waitPhase(t, h, r.GetId(), running)
	resp, err = h.Admin.CancelTask(ctx, connect.NewRequest(&directorv1.CancelTaskRequest{Id: r.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	if ti := resp.Msg.GetTask(); ti.GetPhase() != running || !ti.GetCancelRequested() {
		t.Errorf("cancelled running task: %v, want Running with cancel requested", ti)
	}
	if got := a.next().GetCancelTask(); got.GetTaskId() != r.GetId() {
		t.Fatalf("agent got %v, want CancelTask", got)
	}
	a.status(&directorv1.TaskStatus{TaskId: r.GetId(), Seq: 2, Phase: cancelled})
	waitPhase(t, h, r.GetId(), cancelled)
	if h.AuditKinds(t)["task.cancel"] != 2 {
		t.Errorf("audit %v: want two task.cancel", h.AuditKinds(t))
	}
}

// A pending task whose deadline passes fails NOT_DELIVERED, by the
// director's clock, and is not sent afterwards.
func TestTaskNotDelivered(t *testing.T) {
	h := directortest.Start(t, func(o *director.Options) { o.TaskSweepEvery = 20 * time.Millisecond })
	a := newTaskAgent(t, h, allKinds...)
	a.disconnect()
	task := startTask("web")
	task.DeadlineInMs = 1000
	createTask(t, h, a.node, task)
	time.Sleep(100 * time.Millisecond)
	if ti := getTask(t, h, task.GetId()); ti.GetPhase() != pending {
		t.Fatalf("before its deadline the task is %s, want Pending", ti.GetPhase())
	}
	// Just past the deadline it may still be on its way: pending.
	h.Clock.Advance(2 * time.Second)
	time.Sleep(100 * time.Millisecond)
	if ti := getTask(t, h, task.GetId()); ti.GetPhase() != pending {
		t.Fatalf("a second past its deadline the task is %s, want Pending (its status may be on its way)", ti.GetPhase())
	}
	h.Clock.Advance(10 * time.Second)
	ti := waitPhase(t, h, task.GetId(), failed)
	if ti.GetFailure().GetReason() != directorv1.TaskFailureReason_TASK_FAILURE_REASON_NOT_DELIVERED {
		t.Errorf("failure %v, want NOT_DELIVERED", ti.GetFailure())
	}
	a.connect()
	a.quiet(300 * time.Millisecond)
}

// CreateTask refuses what no agent could run, with the field or the
// reason named, and stores nothing.
func TestCreateTaskRefused(t *testing.T) {
	h := directortest.Start(t)
	full := newTaskAgent(t, h, allKinds...)
	few := newTaskAgent(t, h, "start-vm", "stop-vm")
	old := newTaskAgent(t, h)
	gone := newTaskAgent(t, h, allKinds...)
	if _, err := h.Admin.RevokeNode(context.Background(), connect.NewRequest(&directorv1.RevokeNodeRequest{Id: gone.node})); err != nil {
		t.Fatal(err)
	}
	manifest := func(s string) *directorv1.Task {
		return &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_CreateVm{CreateVm: &directorv1.CreateVM{Manifest: []byte(s)}}}
	}
	for _, c := range []struct {
		name string
		node string
		task *directorv1.Task
		code connect.Code
		want string
	}{
		{"kind not advertised", few.node, &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_PullImage{PullImage: &directorv1.PullImage{Url: "http://x/i", Name: "i"}}},
			connect.CodeFailedPrecondition, "runs start-vm, stop-vm"},
		{"agent predates tasks", old.node, startTask("web"), connect.CodeFailedPrecondition, "predates tasks"},
		{"revoked", gone.node, startTask("web"), connect.CodeFailedPrecondition, "revoked"},
		{"unknown node", "no-such-host", startTask("web"), connect.CodeNotFound, "no-such-host"},
		{"no kind", full.node, &directorv1.Task{Id: uuid.NewString()}, connect.CodeInvalidArgument, "no kind"},
		{"bad id", full.node, &directorv1.Task{Id: "x1", Kind: &directorv1.Task_StartVm{StartVm: &directorv1.StartVM{Vm: "a"}}}, connect.CodeInvalidArgument, "task.id"},
		{"no vm", full.node, startTask(""), connect.CodeInvalidArgument, "task.start_vm.vm"},
		{"wrong manifest kind", full.node, manifest("apiVersion: virtcon/v1\nkind: HostNetwork\n"), connect.CodeInvalidArgument, `kind "HostNetwork"`},
		{"wrong apiVersion", full.node, manifest("apiVersion: v9\nkind: VirtualMachine\n"), connect.CodeInvalidArgument, "apiVersion"},
		{"not YAML", full.node, manifest("{{{"), connect.CodeInvalidArgument, "task.create_vm.manifest"},
		{"too big", full.node, manifest("apiVersion: virtcon/v1\nkind: VirtualMachine\n#" + strings.Repeat("x", director.MaxTaskBody)),
			connect.CodeInvalidArgument, "want at most"},
		{"bad sha256", full.node, &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_PullImage{PullImage: &directorv1.PullImage{Url: "http://x/i", Name: "i", Sha256: "abc"}}},
			connect.CodeInvalidArgument, "sha256"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.Admin.CreateTask(context.Background(), connect.NewRequest(&directorv1.CreateTaskRequest{Node: c.node, Task: c.task}))
			wantCode(t, err, c.code)
			if err != nil && !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want it to say %q", err, c.want)
			}
		})
	}
	list, err := h.Admin.ListTasks(context.Background(), connect.NewRequest(&directorv1.ListTasksRequest{}))
	if err != nil || len(list.Msg.GetTasks()) != 0 {
		t.Errorf("ListTasks after refusals: %v %v, want none", list, err)
	}
	if n := h.Node(t, few.node).GetNode(); strings.Join(n.GetTaskKinds(), ",") != "start-vm,stop-vm" {
		t.Errorf("NodeInfo.task_kinds %v, want the advertised ones", n.GetTaskKinds())
	}
}

func inventoryVM(uid, name, phase string) *directorv1.InventoryVM {
	return &directorv1.InventoryVM{Uid: uid, Name: name, Class: "MANAGED", Phase: phase, Generation: 1, Cpus: 1, MemoryMib: 256}
}

// The agent's full inventory and the deltas that follow it are what
// ListVMs shows; a delta that does not follow is dropped and a Resync
// asked for; ResyncNode reaches the agent through resync/<node>.
func TestInventoryResync(t *testing.T) {
	h := directortest.Start(t)
	a := newTaskAgent(t, h, allKinds...)
	a.disconnect()
	first := a.connect()         // the Resync of this session, answered below
	silent := newTaskAgent(t, h) // an agent without inventory
	silent.disconnect()
	ctx := context.Background()
	listVMs := func(req *directorv1.ListVMsRequest) *directorv1.ListVMsResponse {
		t.Helper()
		resp, err := h.Admin.ListVMs(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	waitVMs := func(want string) *directorv1.ListVMsResponse {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			l := listVMs(&directorv1.ListVMsRequest{Node: a.node})
			var got []string
			for _, v := range l.GetVms() {
				got = append(got, v.GetName()+"="+v.GetPhase())
			}
			if strings.Join(got, ",") == want {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("ListVMs %q after 5 s, want %q", strings.Join(got, ","), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Inventory{Inventory: &directorv1.Inventory{
		Epoch: "e1", Generation: 5, ResyncId: first.GetResyncId(),
		Vms: []*directorv1.InventoryVM{inventoryVM("u1", "web", "Running"), inventoryVM("u2", "db", "Stopped"),
			{Uid: "u3", Name: "stray", Class: "EXTERNAL", Phase: "Running", Source: "qemu"}},
	}}})
	l := waitVMs("db=Stopped,stray=Running,web=Running")
	for _, v := range l.GetVms() {
		if v.GetNodeId() != a.node || v.GetNodeHostname() != "host-t" || v.GetDisplayPhase() != v.GetPhase() {
			t.Errorf("VM %v: want node %s host-t and its phase shown", v, a.node)
		}
	}
	if l.GetVms()[1].GetClass() != "EXTERNAL" || l.GetVms()[1].GetSource() != "qemu" {
		t.Errorf("EXTERNAL VM %v: want it labelled", l.GetVms()[1])
	}

	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_InventoryDelta{InventoryDelta: &directorv1.InventoryDelta{
		Epoch: "e1", Generation: 6, Upserts: []*directorv1.InventoryVM{inventoryVM("u2", "db", "Running")}, RemovedUids: []string{"u3"},
	}}})
	waitVMs("db=Running,web=Running")

	// A gap (generation 8 after 6): dropped, Resync{gap}.
	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_InventoryDelta{InventoryDelta: &directorv1.InventoryDelta{
		Epoch: "e1", Generation: 8, RemovedUids: []string{"u1"},
	}}})
	if r := a.next().GetResync(); r.GetReason() != director.ResyncGap {
		t.Fatalf("after a gap the agent got %v, want Resync{gap}", r)
	}
	// Another epoch (the agent restarted) is a gap too, but the Resync
	// already asked for covers it.
	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_InventoryDelta{InventoryDelta: &directorv1.InventoryDelta{
		Epoch: "e2", Generation: 1, RemovedUids: []string{"u1"},
	}}})
	a.quiet(200 * time.Millisecond)
	waitVMs("db=Running,web=Running")

	all := listVMs(&directorv1.ListVMsRequest{})
	if strings.Join(all.GetNodesWithoutInventory(), ",") != silent.node {
		t.Errorf("nodes_without_inventory %v, want [%s]", all.GetNodesWithoutInventory(), silent.node)
	}
	if c := listVMs(&directorv1.ListVMsRequest{CountOnly: true}); c.GetCount() != 2 || len(c.GetVms()) != 0 {
		t.Errorf("count_only: %d VMs and %d rows, want 2 and none", c.GetCount(), len(c.GetVms()))
	}

	resp, err := h.Admin.ResyncNode(ctx, connect.NewRequest(&directorv1.ResyncNodeRequest{All: true}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(resp.Msg.GetNodes(), ",") != a.node {
		t.Errorf("ResyncNode all: %v, want the one connected node %s", resp.Msg.GetNodes(), a.node)
	}
	r := a.next().GetResync()
	if r.GetReason() != director.ResyncAdmin || r.GetResyncId() == "" {
		t.Fatalf("after ResyncNode the agent got %v, want Resync{admin}", r)
	}
	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Inventory{Inventory: &directorv1.Inventory{
		Epoch: "e2", Generation: 1, ResyncId: r.GetResyncId(), Vms: []*directorv1.InventoryVM{inventoryVM("u9", "new", "Running")},
	}}})
	waitVMs("new=Running")
	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_InventoryDelta{InventoryDelta: &directorv1.InventoryDelta{
		Epoch: "e2", Generation: 2, Upserts: []*directorv1.InventoryVM{inventoryVM("u9", "new", "Paused")},
	}}})
	waitVMs("new=Paused")

	// A node gone silent: its VMs show as unknown, never as stopped.
	a.disconnect()
	h.Clock.Advance(director.DefaultOfflineAfter + time.Second)
	h.WaitNodeState(t, a.node, director.StateOffline, 5*time.Second)
	v := listVMs(&directorv1.ListVMsRequest{Node: a.node}).GetVms()
	if len(v) != 1 || !strings.HasPrefix(v[0].GetDisplayPhase(), "unknown (last seen Paused at ") {
		t.Errorf("an offline node's VM: %v, want display phase unknown (last seen Paused at ...)", v)
	}
	// A forgotten node's inventory goes with it.
	if _, err := h.Admin.ForgetNode(ctx, connect.NewRequest(&directorv1.ForgetNodeRequest{Id: a.node})); err != nil {
		t.Fatal(err)
	}
	if v := listVMs(&directorv1.ListVMsRequest{}).GetVms(); len(v) != 0 {
		t.Errorf("after ForgetNode ListVMs shows %v, want nothing", v)
	}
}

// A diagnostics bundle's chunks are stored and acked in order, and
// GetTaskData gives them back whole; a chunk for a task that takes none
// is neither stored nor acked.
func TestTaskData(t *testing.T) {
	h := directortest.Start(t)
	a := newTaskAgent(t, h, allKinds...)
	task := &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_CollectDiagnostics{CollectDiagnostics: &directorv1.CollectDiagnostics{}}}
	createTask(t, h, a.node, task)
	if got := a.next().GetTask(); got.GetId() != task.GetId() {
		t.Fatalf("agent got %v, want the task", got)
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: running})
	bundle := []byte(strings.Repeat("0123456789abcdef", 20000)) // 320,000 bytes
	chunks := [][]byte{bundle[:256<<10], bundle[256<<10:]}
	var off uint64
	for i, c := range chunks {
		a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskData{TaskData: &directorv1.TaskData{
			TaskId: task.GetId(), Offset: off, Data: c, Last: i == len(chunks)-1}}})
		off += uint64(len(c))
		if ack := a.next().GetTaskDataAck(); ack.GetTaskId() != task.GetId() || ack.GetOffset() != off {
			t.Fatalf("ack %v, want offset %d", ack, off)
		}
	}
	other := startTask("web")
	createTask(t, h, a.node, other)
	a.next()
	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskData{TaskData: &directorv1.TaskData{
		TaskId: other.GetId(), Data: []byte("x"), Last: true}}})
	a.quiet(300 * time.Millisecond)

	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 2, Phase: succeeded})
	waitPhase(t, h, task.GetId(), succeeded)
	stream, err := h.Admin.GetTaskData(context.Background(), connect.NewRequest(&directorv1.GetTaskDataRequest{Id: task.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for stream.Receive() {
		got = append(got, stream.Msg().GetData()...)
	}
	if err := stream.Err(); err != nil || string(got) != string(bundle) {
		t.Errorf("GetTaskData: %d bytes (%v), want the %d sent", len(got), err, len(bundle))
	}
	stream, err = h.Admin.GetTaskData(context.Background(), connect.NewRequest(&directorv1.GetTaskDataRequest{Id: other.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		t.Errorf("the start-vm task has data: %d bytes", len(stream.Msg().GetData()))
	}
}

// A flood of progress statuses is coalesced into a few writes (the last
// progress kept), and the heartbeat sent after it is answered without
// waiting for them: the session's writer, not the goroutine that answers
// heartbeats, talks to etcd.
func TestProgressCoalesced(t *testing.T) {
	h := directortest.Start(t)
	a := newTaskAgent(t, h, allKinds...)
	task := &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_PullImage{PullImage: &directorv1.PullImage{Url: "http://x/i", Name: "i"}}}
	createTask(t, h, a.node, task)
	a.next()
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: queued})
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 2, Phase: running})
	waitPhase(t, h, task.GetId(), running)
	s := h.Store(t)
	defer s.Close()
	rev := func() int64 {
		resp, err := s.Client().Get(context.Background(), s.Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	r0, start := rev(), time.Now()
	const n = 500
	for i := int64(1); i <= n; i++ {
		a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: uint64(2 + i), Phase: running,
			Progress: &directorv1.Progress{Done: i, Total: n, Unit: "bytes"}})
	}
	t0 := time.Now()
	a.send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Heartbeat{Heartbeat: &directorv1.Heartbeat{Seq: 1}}})
	if ack := a.next().GetHeartbeatAck(); ack.GetSeq() != 1 {
		t.Fatalf("after the statuses the agent got %v, want HeartbeatAck 1", ack)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("heartbeat answered %s after %d statuses, want well under 2 s", d, n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for getTask(t, h, task.GetId()).GetProgress().GetDone() != n {
		if time.Now().After(deadline) {
			t.Fatalf("progress %v after 5 s, want the last one (%d)", getTask(t, h, task.GetId()).GetProgress(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// at most 2 writes a second, and one more for the last progress
	took := time.Since(start)
	if writes, most := rev()-r0, int64(took/progressEvery)+2; writes > most {
		t.Errorf("%d progress statuses over %s took %d writes, want them coalesced (at most %d: 2 a second)", n, took.Round(time.Millisecond), writes, most)
	}
}

// A replica's id is the one given, or one made on first start and kept
// in <data>/replica-id across restarts; ListReplicas names this replica.
func TestReplicaID(t *testing.T) {
	h := directortest.Start(t)
	b, err := os.ReadFile(filepath.Join(h.DataDir, director.ReplicaIDFileName))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || id != h.D.ReplicaID() {
		t.Fatalf("replica id %q, file says %q", h.D.ReplicaID(), id)
	}
	h.Restart(t)
	if h.D.ReplicaID() != id {
		t.Errorf("after a restart the replica id is %q, want %q kept", h.D.ReplicaID(), id)
	}
	resp, err := h.Admin.ListReplicas(context.Background(), connect.NewRequest(&directorv1.ListReplicasRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	// (who leads is the HA tests' business)
	if r := resp.Msg.GetReplicas(); len(r) != 1 || r[0].GetId() != id || r[0].GetAdvertise() != h.D.Advertise() {
		t.Errorf("ListReplicas %v, want this replica", r)
	}

	named := directortest.Start(t, func(o *director.Options) { o.ReplicaID = "dir-a" })
	a := newTaskAgent(t, named, allKinds...)
	if ni := named.Node(t, a.node).GetNode(); ni.GetReplicaId() != "dir-a" || !ni.GetConnected() {
		t.Errorf("NodeInfo %v: want connected via dir-a", ni)
	}
	for _, bad := range []string{"a.b", "-x", strings.Repeat("x", 64)} {
		o := named.Options
		o.DataDir, o.ReplicaID, o.Listen = t.TempDir(), bad, "127.0.0.1:0"
		if d, err := director.Open(context.Background(), o); err == nil {
			d.Close()
			t.Errorf("replica id %q accepted", bad)
		}
	}
}

// A task the director ended on its own word (cancelled while pending)
// that had reached its agent all the same takes the agent's outcome:
// the store says what the host did, not what the director guessed.
func TestAgentOutcomeReplacesDirectorsEnd(t *testing.T) {
	h := directortest.Start(t)
	a := newTaskAgent(t, h, allKinds...)
	ctx := context.Background()
	task := startTask("web")
	createTask(t, h, a.node, task)
	if got := a.next().GetTask(); got.GetId() != task.GetId() {
		t.Fatalf("agent got %v, want the task", got)
	}
	// no word from the agent yet: the cancel ends it at once
	resp, err := h.Admin.CancelTask(ctx, connect.NewRequest(&directorv1.CancelTaskRequest{Id: task.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	if ti := resp.Msg.GetTask(); ti.GetPhase() != cancelled {
		t.Fatalf("cancel of a pending task: %v, want Cancelled", ti)
	}
	// the agent had started it: its Running changes nothing, its end does
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: running})
	time.Sleep(300 * time.Millisecond)
	if ti := getTask(t, h, task.GetId()); ti.GetPhase() != cancelled {
		t.Fatalf("after the agent's Running: %s, want still Cancelled", ti.GetPhase())
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 2, Phase: succeeded})
	waitPhase(t, h, task.GetId(), succeeded)
	// and the agent's end is final
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 3, Phase: failed})
	time.Sleep(300 * time.Millisecond)
	if ti := getTask(t, h, task.GetId()); ti.GetPhase() != succeeded {
		t.Errorf("after a later Failed: %s, want the agent's first end, Succeeded", ti.GetPhase())
	}
}

// A pull's URL is stored while the task runs: one with a user name or
// password is refused (never echoed), and a presigned URL's query (its
// signature) is dropped from the store when the task ends.
func TestPullImageURLSecrets(t *testing.T) {
	h := directortest.Start(t)
	a := newTaskAgent(t, h, allKinds...)
	pull := func(u string) *directorv1.Task {
		return &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_PullImage{PullImage: &directorv1.PullImage{Url: u, Name: "base"}}}
	}
	for _, u := range []string{"http://alice:s3cr3tpw@images.example/base.img", "https://s3cr3tpw@images.example/b.img", "ftp://images.example/b.img", "images.example/b.img"} {
		_, err := h.Admin.CreateTask(context.Background(), connect.NewRequest(&directorv1.CreateTaskRequest{Node: a.node, Task: pull(u)}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || strings.Contains(err.Error(), "s3cr3tpw") {
			t.Errorf("pull-image %s: %v; want InvalidArgument without the password", strings.ReplaceAll(u, "s3cr3tpw", "<pw>"), err)
		}
	}
	task := pull("https://images.example/base.img?X-Amz-Signature=s1gnatur3tok")
	createTask(t, h, a.node, task)
	if got := a.next().GetTask(); got.GetPullImage().GetUrl() != task.GetPullImage().GetUrl() {
		t.Fatalf("the agent got %v, want the whole URL", got)
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: succeeded})
	waitPhase(t, h, task.GetId(), succeeded)
	deadline := time.Now().Add(5 * time.Second)
	for {
		leak := ""
		for k, v := range h.StoreValues(t) {
			if strings.Contains(string(v), "s1gnatur3tok") {
				leak = k
			}
		}
		if leak == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the presigned URL's signature is still in the store (%s) after the task ended", leak)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
