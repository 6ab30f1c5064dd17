package directorcli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/taskkind"
	"github.com/virtcon/virtcon/internal/output"
	"github.com/virtcon/virtcon/internal/testutil"
	"google.golang.org/protobuf/proto"
)

// taskFake is an AdminService that stores the tasks it is given and
// plays events on WatchTask once the watched task is created.
type taskFake struct {
	fakeAdmin

	mu        sync.Mutex
	created   []*directorv1.CreateTaskRequest
	createErr error
	// watchFirst: the watch was open when CreateTask came
	watchFirst bool
	watchOpen  chan struct{}
	made       chan struct{}
	events     []*directorv1.TaskInfo // WatchTask sends these, then ends
	hold       bool                   // ... or waits for the client to go
	sent       chan struct{}          // closed once the events are sent
	getTask    *directorv1.TaskInfo
	tasks      []*directorv1.TaskInfo // ListTasks
	listReq    *directorv1.ListTasksRequest
	cancelReq  *directorv1.CancelTaskRequest
	data       []*directorv1.TaskDataChunk
	vms        *directorv1.ListVMsResponse
	vmsReq     *directorv1.ListVMsRequest
	resyncReq  *directorv1.ResyncNodeRequest
	replicas   []*directorv1.ReplicaInfo
}

func newTaskFake() *taskFake {
	return &taskFake{fakeAdmin: fakeAdmin{nodes: testNodes()}, watchOpen: make(chan struct{}), made: make(chan struct{})}
}

func (f *taskFake) CreateTask(ctx context.Context, r *connect.Request[directorv1.CreateTaskRequest]) (*connect.Response[directorv1.CreateTaskResponse], error) {
	f.calls.Add(1)
	// a client that opens its watch first has it open by now (or soon:
	// the two requests race to the server)
	select {
	case <-f.watchOpen:
		f.watchFirst = true
	case <-time.After(2 * time.Second):
	}
	f.mu.Lock()
	f.created = append(f.created, r.Msg)
	f.mu.Unlock()
	if f.createErr != nil {
		return nil, f.createErr
	}
	close(f.made)
	t := r.Msg.GetTask()
	return connect.NewResponse(&directorv1.CreateTaskResponse{Task: &directorv1.TaskInfo{Id: t.GetId(), NodeId: testNodes()[1].Id,
		NodeHostname: "kvm-01", Kind: "start-vm", Phase: directorv1.TaskPhase_TASK_PHASE_PENDING}}), nil
}

func (f *taskFake) WatchTask(ctx context.Context, r *connect.Request[directorv1.WatchTaskRequest], s *connect.ServerStream[directorv1.TaskInfo]) error {
	f.calls.Add(1)
	close(f.watchOpen)
	if err := s.Send(nil); err != nil { // the headers: the watch is open (as the director does)
		return err
	}
	select {
	case <-f.made:
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, e := range f.events {
		e = proto.Clone(e).(*directorv1.TaskInfo)
		e.Id = r.Msg.GetId()
		if err := s.Send(e); err != nil {
			return err
		}
	}
	if f.sent != nil {
		close(f.sent)
	}
	if f.hold {
		<-ctx.Done()
	}
	return nil
}

func (f *taskFake) GetTask(ctx context.Context, r *connect.Request[directorv1.GetTaskRequest]) (*connect.Response[directorv1.GetTaskResponse], error) {
	f.calls.Add(1)
	if f.getTask == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %q: not found", r.Msg.GetId()))
	}
	return connect.NewResponse(&directorv1.GetTaskResponse{Task: f.getTask}), nil
}

func (f *taskFake) ListTasks(ctx context.Context, r *connect.Request[directorv1.ListTasksRequest]) (*connect.Response[directorv1.ListTasksResponse], error) {
	f.calls.Add(1)
	f.listReq = r.Msg
	return connect.NewResponse(&directorv1.ListTasksResponse{Tasks: f.tasks}), nil
}

func (f *taskFake) CancelTask(ctx context.Context, r *connect.Request[directorv1.CancelTaskRequest]) (*connect.Response[directorv1.CancelTaskResponse], error) {
	f.calls.Add(1)
	f.cancelReq = r.Msg
	t := proto.Clone(f.getTask).(*directorv1.TaskInfo)
	t.CancelRequested = true
	return connect.NewResponse(&directorv1.CancelTaskResponse{Task: t}), nil
}

func (f *taskFake) GetTaskData(ctx context.Context, r *connect.Request[directorv1.GetTaskDataRequest], s *connect.ServerStream[directorv1.TaskDataChunk]) error {
	f.calls.Add(1)
	for _, c := range f.data {
		if err := s.Send(c); err != nil {
			return err
		}
	}
	return nil
}

func (f *taskFake) ListVMs(ctx context.Context, r *connect.Request[directorv1.ListVMsRequest]) (*connect.Response[directorv1.ListVMsResponse], error) {
	f.calls.Add(1)
	f.vmsReq = r.Msg
	return connect.NewResponse(f.vms), nil
}

func (f *taskFake) ResyncNode(ctx context.Context, r *connect.Request[directorv1.ResyncNodeRequest]) (*connect.Response[directorv1.ResyncNodeResponse], error) {
	f.calls.Add(1)
	f.resyncReq = r.Msg
	if r.Msg.GetAll() {
		return connect.NewResponse(&directorv1.ResyncNodeResponse{Nodes: []string{"kvm-01", "kvm-03"}}), nil
	}
	return connect.NewResponse(&directorv1.ResyncNodeResponse{Nodes: []string{"kvm-03"}}), nil
}

func (f *taskFake) ListReplicas(ctx context.Context, r *connect.Request[directorv1.ListReplicasRequest]) (*connect.Response[directorv1.ListReplicasResponse], error) {
	f.calls.Add(1)
	return connect.NewResponse(&directorv1.ListReplicasResponse{Replicas: f.replicas}), nil
}

// serveTasks serves f on dir/admin.sock until the test ends.
func serveTasks(t *testing.T, dir string, f *taskFake) {
	t.Helper()
	serveHandler(t, dir, f)
}

// runCLIIn is runCLI with stdin.
func runCLIIn(t *testing.T, dir, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut strings.Builder
	env := &Env{IO: &IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut},
		Now: func() time.Time { return testNow }, Loc: time.UTC}
	code := runEnv(context.Background(), append([]string{"--data", dir}, args...), env)
	return out.String(), errOut.String(), code
}

const testManifest = `apiVersion: virtcon/v1
kind: VirtualMachine
metadata:
  name: web
spec:
  cpus: 1
`

const testNetwork = `apiVersion: virtcon/v1
kind: HostNetwork
links: []
`

// writeFile writes content into dir/name and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The right arguments for each kind: a wrong-flag case adds one flag.
func kindArgs(t *testing.T, dir, kind string) []string {
	switch kind {
	case "create-vm":
		return []string{"-f", writeFile(t, dir, "vm.yaml", testManifest)}
	case "apply-network":
		return []string{"-f", writeFile(t, dir, "net.yaml", testNetwork)}
	case "pull-image":
		return []string{"https://images.example/debian.qcow2", "--name", "debian"}
	case "collect-diagnostics":
		return nil
	}
	return []string{"web"}
}

// flagValue is a value for a kind-specific flag.
func flagArgs(t *testing.T, dir, flag string) []string {
	switch flag {
	case "file":
		return []string{"--file", writeFile(t, dir, "other.yaml", testManifest)}
	case "timeout", "trial":
		return []string{"--" + flag, "30s"}
	case "force", "fresh-probe":
		return []string{"--" + flag}
	case "name":
		return []string{"--name", "img"}
	case "sha256":
		return []string{"--sha256", strings.Repeat("a", 64)}
	case "output-file":
		return []string{"--wait", "-O", filepath.Join(dir, "bundle.tar.gz")}
	}
	t.Fatalf("no value for --%s", flag)
	return nil
}

// Every kind-specific flag on every kind that does not take it is a usage
// error naming the kinds that do; the director is never asked.
func TestTaskRunWrongFlag(t *testing.T) {
	n := 0
	for _, k := range kindSpecs {
		for _, f := range kindFlags {
			if slices.Contains(k.flags, f) {
				continue
			}
			n++
			t.Run(k.name+"/"+f, func(t *testing.T) {
				dir := shortDir(t)
				fake := newTaskFake()
				serveTasks(t, dir, fake)
				args := append([]string{"task", "run", "kvm-01", k.name}, kindArgs(t, dir, k.name)...)
				args = append(args, flagArgs(t, dir, f)...)
				out, errOut, code := runCLI(t, dir, args...)
				want := fmt.Sprintf("--%s: %s does not take it (only %s do)", f, k.name, strings.Join(kindsTaking(f), ", "))
				if code != ExitUsage || !strings.Contains(errOut, want) {
					t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, ExitUsage, want)
				}
				if out != "" || fake.calls.Load() != 0 {
					t.Errorf("stdout %q, %d calls; want nothing", out, fake.calls.Load())
				}
			})
		}
	}
	if n < 40 {
		t.Errorf("%d wrong-flag cases; the table has more kinds and flags than that", n)
	}
}

// Other bad command lines of task run, task list, show and cancel, node
// resync: usage errors before the director is asked.
func TestTaskFlagValidation(t *testing.T) {
	tests := []struct {
		name  string
		args  []string // {dir} is the test's directory
		stdin string
		want  string
	}{
		{"unknown kind", []string{"task", "run", "kvm-01", "run-shell", "ls"}, "", `task kind "run-shell": unknown (want one of create-vm, start-vm`},
		{"no kind", []string{"task", "run", "kvm-01"}, "", "requires at least 2 arg"},
		{"start without name", []string{"task", "run", "kvm-01", "start-vm"}, "", "start-vm takes 1 argument(s) after the kind, got 0 (usage: task run NODE start-vm NAME)"},
		{"start two names", []string{"task", "run", "kvm-01", "start-vm", "a", "b"}, "", "got 2"},
		{"empty name", []string{"task", "run", "kvm-01", "stop-vm", " "}, "", "stop-vm: empty NAME"},
		{"empty node", []string{"task", "run", "", "start-vm", "web"}, "", "empty NODE"},
		{"create without file", []string{"task", "run", "kvm-01", "create-vm"}, "", "create-vm needs --file (usage: task run NODE create-vm -f FILE)"},
		{"create with an argument", []string{"task", "run", "kvm-01", "create-vm", "web", "-f", "-"}, testManifest, "create-vm takes 0 argument(s)"},
		{"create missing file", []string{"task", "run", "kvm-01", "create-vm", "-f", "{dir}/nope.yaml"}, "", "no such file"},
		{"create empty stdin", []string{"task", "run", "kvm-01", "create-vm", "-f", "-"}, "", "-f stdin: empty"},
		{"create not yaml", []string{"task", "run", "kvm-01", "create-vm", "-f", "-"}, "a: [b", "-f stdin: not a YAML document"},
		{"create a network", []string{"task", "run", "kvm-01", "create-vm", "-f", "-"}, testNetwork, `apiVersion "virtcon/v1", kind "HostNetwork": want virtcon/v1 VirtualMachine`},
		{"network a vm", []string{"task", "run", "kvm-01", "apply-network", "-f", "-"}, testManifest, "want virtcon/v1 HostNetwork"},
		{"create too large", []string{"task", "run", "kvm-01", "create-vm", "-f", "-"}, testManifest + "#" + strings.Repeat("x", maxTaskFile), "larger than 1048576 bytes"},
		{"pull without name", []string{"task", "run", "kvm-01", "pull-image", "https://i.example/a.img"}, "", "pull-image needs --name"},
		{"pull bad url", []string{"task", "run", "kvm-01", "pull-image", "ftp://i.example/a.img", "--name", "a"}, "", `pull-image URL "ftp://i.example/a.img": want an http:// or https:// URL`},
		{"pull bad sha", []string{"task", "run", "kvm-01", "pull-image", "https://i.example/a.img", "--name", "a", "--sha256", "abc"}, "", `--sha256 "abc": want 64 hex digits`},
		{"deadline zero", []string{"task", "run", "kvm-01", "start-vm", "web", "--deadline", "0"}, "", "--deadline 0s: want more than 0"},
		{"deadline negative", []string{"task", "run", "kvm-01", "start-vm", "web", "--deadline", "-1m"}, "", "--deadline"},
		{"deadline too long", []string{"task", "run", "kvm-01", "start-vm", "web", "--deadline", "200h"}, "", "at most 7d"},
		{"deadline not a duration", []string{"task", "run", "kvm-01", "start-vm", "web", "--deadline", "soon"}, "", `"soon"`},
		{"timeout negative", []string{"task", "run", "kvm-01", "stop-vm", "web", "--timeout", "-5s"}, "", `"--timeout" flag: "-5s": must not be negative`},
		{"trial negative", []string{"task", "run", "kvm-01", "apply-network", "-f", "-", "--trial", "-5s"}, testNetwork, `"--trial" flag: "-5s": must not be negative`},
		{"output file without wait", []string{"task", "run", "kvm-01", "collect-diagnostics", "-O", "{dir}/b.tgz"}, "", "-O: only with --wait"},
		{"output file stdout", []string{"task", "run", "kvm-01", "collect-diagnostics", "--wait", "-O", "-"}, "", "-O: want a file name"},
		{"output file no dir", []string{"task", "run", "kvm-01", "collect-diagnostics", "--wait", "-O", "{dir}/no/b.tgz"}, "", "no such file"},
		{"bad id", []string{"task", "run", "kvm-01", "start-vm", "web", "--id", "1234"}, "", `--id "1234": want a UUID`},
		{"list bad phase", []string{"task", "list", "--phase", "done"}, "", `--phase "done": want one of pending, queued, running, succeeded, failed, cancelled`},
		{"list bad limit", []string{"task", "list", "--limit", "-1"}, "", "--limit -1"},
		{"show short id", []string{"task", "show", "abc"}, "", `task "abc": want a task id or a unique prefix`},
		{"show not an id", []string{"task", "show", "web-01"}, "", `task "web-01"`},
		{"cancel no id", []string{"task", "cancel"}, "", "accepts 1 arg"},
		{"resync nothing", []string{"node", "resync"}, "", "name one node (ID|HOSTNAME) or --all"},
		{"resync both", []string{"node", "resync", "kvm-01", "--all"}, "", "a node or --all, not both"},
		{"vm list extra", []string{"vm", "list", "web"}, "", "unknown command"},
		{"replica list extra", []string{"replica", "list", "x"}, "", "unknown command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			fake := newTaskFake()
			serveTasks(t, dir, fake)
			args := slices.Clone(tc.args)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "{dir}", dir)
			}
			out, errOut, code := runCLIIn(t, dir, tc.stdin, args...)
			if code != ExitUsage || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, ExitUsage, tc.want)
			}
			if out != "" || fake.calls.Load() != 0 {
				t.Errorf("stdout %q, %d calls; want nothing", out, fake.calls.Load())
			}
		})
	}
}

// What task run asks of the director for each kind: the typed Task, its
// default or given deadline, a fresh UUID (or --id's); without --wait it
// prints the id and ends.
func TestTaskRunRequests(t *testing.T) {
	const min = int64(time.Minute / time.Millisecond)
	tests := []struct {
		name  string
		args  []string
		stdin string
		want  *directorv1.Task // id aside
	}{
		{"create-vm", []string{"create-vm", "-f", "-"}, testManifest,
			&directorv1.Task{DeadlineInMs: 30 * min, Kind: &directorv1.Task_CreateVm{CreateVm: &directorv1.CreateVM{Manifest: []byte(testManifest), DirectorGeneration: "1"}}}},
		{"start-vm", []string{"start-vm", "web"}, "",
			&directorv1.Task{DeadlineInMs: 5 * min, Kind: &directorv1.Task_StartVm{StartVm: &directorv1.StartVM{Vm: "web"}}}},
		{"start-vm deadline", []string{"start-vm", "web", "--deadline", "90s"}, "",
			&directorv1.Task{DeadlineInMs: 90_000, Kind: &directorv1.Task_StartVm{StartVm: &directorv1.StartVM{Vm: "web"}}}},
		{"stop-vm", []string{"stop-vm", "web"}, "",
			&directorv1.Task{DeadlineInMs: 5 * min, Kind: &directorv1.Task_StopVm{StopVm: &directorv1.StopVM{Vm: "web"}}}},
		{"stop-vm force timeout", []string{"stop-vm", "web", "--timeout", "20s", "--force"}, "",
			&directorv1.Task{DeadlineInMs: 80_000, Kind: &directorv1.Task_StopVm{StopVm: &directorv1.StopVM{Vm: "web", TimeoutMs: 20_000, Force: true}}}},
		// --timeout 0 is virt vm stop's: at once (force too, which an
		// agent older than now took for it), not the host's default
		{"stop-vm timeout 0", []string{"stop-vm", "web", "--timeout", "0"}, "",
			&directorv1.Task{DeadlineInMs: 5 * min, Kind: &directorv1.Task_StopVm{StopVm: &directorv1.StopVM{Vm: "web", Force: true, Now: true}}}},
		{"stop-vm timeout 0 force", []string{"stop-vm", "web", "--timeout", "0s", "--force"}, "",
			&directorv1.Task{DeadlineInMs: 5 * min, Kind: &directorv1.Task_StopVm{StopVm: &directorv1.StopVM{Vm: "web", Force: true, Now: true}}}},
		{"reboot-vm", []string{"reboot-vm", "web"}, "",
			&directorv1.Task{DeadlineInMs: 5 * min, Kind: &directorv1.Task_RebootVm{RebootVm: &directorv1.RebootVM{Vm: "web"}}}},
		{"delete-vm", []string{"delete-vm", "web", "--force"}, "",
			&directorv1.Task{DeadlineInMs: 5 * min, Kind: &directorv1.Task_DeleteVm{DeleteVm: &directorv1.DeleteVM{Vm: "web", Force: true}}}},
		{"pull-image", []string{"pull-image", "https://i.example/a.img", "--name", "a", "--sha256", strings.Repeat("AB", 32)}, "",
			&directorv1.Task{DeadlineInMs: 120 * min, Kind: &directorv1.Task_PullImage{PullImage: &directorv1.PullImage{Url: "https://i.example/a.img",
				Name: "a", Sha256: strings.Repeat("ab", 32)}}}},
		{"apply-network", []string{"apply-network", "-f", "-"}, testNetwork,
			&directorv1.Task{DeadlineInMs: 4 * min, Kind: &directorv1.Task_ApplyNetwork{ApplyNetwork: &directorv1.ApplyNetwork{HostNetwork: []byte(testNetwork)}}}},
		{"apply-network trial", []string{"apply-network", "-f", "-", "--trial", "30s"}, testNetwork,
			&directorv1.Task{DeadlineInMs: 150_000, Kind: &directorv1.Task_ApplyNetwork{ApplyNetwork: &directorv1.ApplyNetwork{HostNetwork: []byte(testNetwork), TrialMs: 30_000}}}},
		{"collect-diagnostics", []string{"collect-diagnostics", "--fresh-probe"}, "",
			&directorv1.Task{DeadlineInMs: 10 * min, Kind: &directorv1.Task_CollectDiagnostics{CollectDiagnostics: &directorv1.CollectDiagnostics{FreshProbe: true}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			fake := newTaskFake()
			close(fake.watchOpen) // no watch without --wait: CreateTask need not wait for one
			serveTasks(t, dir, fake)
			out, errOut, code := runCLIIn(t, dir, tc.stdin, append([]string{"task", "run", "kvm-01"}, tc.args...)...)
			if code != ExitOK {
				t.Fatalf("exit %d; stderr %s", code, errOut)
			}
			if len(fake.created) != 1 {
				t.Fatalf("%d CreateTask calls; want 1", len(fake.created))
			}
			req := fake.created[0]
			id := req.GetTask().GetId()
			if u, err := uuid.Parse(id); err != nil || u.String() != id {
				t.Errorf("task id %q: not a UUID as uuid writes it", id)
			}
			if out != id+"\n" {
				t.Errorf("stdout %q; want the id alone on its line", out)
			}
			if req.GetNode() != "kvm-01" {
				t.Errorf("node %q; want kvm-01 as given", req.GetNode())
			}
			got := proto.Clone(req.GetTask()).(*directorv1.Task)
			got.Id = ""
			if !proto.Equal(got, tc.want) {
				t.Errorf("task %v; want %v", got, tc.want)
			}
		})
	}
	t.Run("given id, json", func(t *testing.T) {
		dir := shortDir(t)
		fake := newTaskFake()
		close(fake.watchOpen)
		serveTasks(t, dir, fake)
		const id = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
		out, errOut, code := runCLI(t, dir, "task", "run", "kvm-01", "start-vm", "web", "--id", strings.ToUpper(id), "-o", "json")
		if code != ExitOK {
			t.Fatalf("exit %d; stderr %s", code, errOut)
		}
		if got := fake.created[0].GetTask().GetId(); got != id {
			t.Errorf("id %q; want %q", got, id)
		}
		var v map[string]string
		if err := json.Unmarshal([]byte(out), &v); err != nil || v["id"] != id {
			t.Errorf("stdout %q (%v); want {\"id\": %q}", out, err, id)
		}
	})
}

func testTaskInfo(phase directorv1.TaskPhase) *directorv1.TaskInfo {
	return &directorv1.TaskInfo{Id: "7e57a5c0-1111-4222-8333-444455556666", NodeId: testNodes()[1].Id, NodeHostname: "kvm-01",
		Kind: "start-vm", Summary: "start-vm web", Phase: phase, CreatedAtUnixMs: ms(testNow.Add(-10 * time.Second)), CreatedBy: "root",
		DeadlineUnixMs: ms(testNow.Add(5*time.Minute - 10*time.Second)), UpdatedAtUnixMs: ms(testNow.Add(-2 * time.Second)),
		ReplicaId: "r1", DispatchUs: 1800}
}

// task run --wait: the watch is open before the task is created, the
// phases, progress and new log lines go to stderr (each once), the task
// as it ended to stdout, and the exit code says how it ended.
func TestTaskRunWait(t *testing.T) {
	pending := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_PENDING)
	queued := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_QUEUED)
	running := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_RUNNING)
	running.Log = []string{"starting web"}
	running2 := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_RUNNING)
	running2.Log = []string{"starting web", "qemu pid 4242"}
	running2.Progress = &directorv1.Progress{Done: 4 << 20, Total: 12 << 20, Unit: "bytes"}
	succeeded := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_SUCCEEDED)
	succeeded.Log = running2.Log
	succeeded.Result = &directorv1.TaskResult{Result: &directorv1.TaskResult_Vm{Vm: &directorv1.VMResult{Uid: "0b3e9c1a-2d4f-4a6b-8c0d-1e2f3a4b5c6d",
		Name: "web", Phase: "Running"}}}
	failed := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_FAILED)
	failed.Failure = &directorv1.TaskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_NOT_FOUND, Message: `vm "web": not found`}
	invalid := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_FAILED)
	invalid.Failure = &directorv1.TaskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT, Message: "invalid virtual machine",
		Fields: []*directorv1.FieldError{{Field: "spec.cpus", Value: "0", Message: "must be at least 1"}}}
	cancelled := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_CANCELLED)
	cancelled.CancelRequested = true

	tests := []struct {
		name       string
		events     []*directorv1.TaskInfo
		format     string
		code       int
		wantStderr []string // in order
		wantOut    string   // in stdout
	}{
		{"succeeded", []*directorv1.TaskInfo{pending, queued, running, running2, succeeded}, output.Table, ExitOK,
			[]string{"Pending on kvm-01", ": Queued\n", ": Running\n", "  starting web\n", "  progress: 4.0 MiB of 12.0 MiB (33%)\n", "  qemu pid 4242\n"},
			"Result:    VM web (0b3e9c1a-2d4f-4a6b-8c0d-1e2f3a4b5c6d) Running"},
		{"succeeded json", []*directorv1.TaskInfo{queued, succeeded}, output.JSON, ExitOK, []string{": Queued\n"}, `"phase": "Succeeded"`},
		{"failed", []*directorv1.TaskInfo{queued, failed}, output.Table, ExitError,
			[]string{": Queued\n", `failed: NOT_FOUND: vm "web": not found`}, "Failed (NOT_FOUND)"},
		{"failed with fields", []*directorv1.TaskInfo{invalid}, output.JSON, ExitError,
			[]string{"failed: INVALID_ARGUMENT: invalid virtual machine\n  spec.cpus \"0\": must be at least 1"}, `"reason": "INVALID_ARGUMENT"`},
		{"cancelled", []*directorv1.TaskInfo{running, cancelled}, output.Table, ExitError, []string{" cancelled"}, "Phase:     Cancelled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			fake := newTaskFake()
			fake.events = tc.events
			serveTasks(t, dir, fake)
			out, errOut, code := runCLI(t, dir, "task", "run", "kvm-01", "start-vm", "web", "--wait", "-o", tc.format)
			if code != tc.code {
				t.Errorf("exit %d; want %d (stderr %q)", code, tc.code, errOut)
			}
			if !fake.watchFirst {
				t.Error("CreateTask came before WatchTask was open: a task that ends at once could be missed")
			}
			id := fake.created[0].GetTask().GetId()
			rest := errOut
			for _, w := range tc.wantStderr {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stderr %q; want %q (after what came before it)", errOut, w)
				}
				rest = rest[i+len(w):]
			}
			if strings.Count(errOut, "starting web") > 1 {
				t.Errorf("stderr %q: a log line printed twice", errOut)
			}
			if tc.code != ExitOK && !strings.Contains(errOut, "virt-director: task "+id) {
				t.Errorf("stderr %q; want the error to name task %s", errOut, id)
			}
			if !strings.Contains(out, tc.wantOut) || !strings.Contains(out, id) {
				t.Errorf("stdout %q; want %q and the id", out, tc.wantOut)
			}
			if strings.Contains(out, "progress:") || strings.Contains(out, "Queued\n") {
				t.Errorf("stdout %q holds progress lines", out)
			}
		})
	}
}

// A CreateTask the director may or may not have stored says so, with the
// id to look at or retry with; a director that is not running stored
// nothing and says that.
func TestTaskRunAmbiguous(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			dir := shortDir(t)
			fake := newTaskFake()
			if !wait {
				close(fake.watchOpen)
			}
			fake.createErr = connect.NewError(connect.CodeUnavailable, errors.New("etcd: no answer within 3s: cluster without quorum or unreachable"))
			serveTasks(t, dir, fake)
			args := []string{"task", "run", "kvm-01", "start-vm", "web"}
			if wait {
				args = append(args, "--wait")
			}
			out, errOut, code := runCLI(t, dir, args...)
			id := fake.created[0].GetTask().GetId()
			want := fmt.Sprintf("task run kvm-01 start-vm: etcd: no answer within 3s: cluster without quorum or unreachable: "+
				"the task may or may not be stored: virt-director task show %s (or run the same again with --id %s)", id, id)
			if code != ExitError || !strings.Contains(errOut, want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, nothing, %q", code, out, errOut, ExitError, want)
			}
		})
	}
	t.Run("not running", func(t *testing.T) {
		dir := shortDir(t)
		_, errOut, code := runCLI(t, dir, "task", "run", "kvm-01", "start-vm", "web")
		if code != ExitError || !strings.Contains(errOut, "director not running (no socket at") || strings.Contains(errOut, "may or may not") {
			t.Errorf("exit %d, stderr %q; want %d and director not running", code, errOut, ExitError)
		}
	})
}

// The director's refusals keep their words: an unknown node, a kind the
// node does not run, a refused field.
func TestTaskRunRefused(t *testing.T) {
	tests := []struct {
		err  error
		code int
		want string
	}{
		{connect.NewError(connect.CodeNotFound, errors.New(`node "kvm-09": not found`)), ExitError,
			`task run kvm-09 start-vm: node "kvm-09": not found (virt-director node list)`},
		{connect.NewError(connect.CodeFailedPrecondition, errors.New("node kvm-09 does not run start-vm (it runs collect-diagnostics)")), ExitError,
			"task run kvm-09 start-vm: node kvm-09 does not run start-vm (it runs collect-diagnostics)"},
		{connect.NewError(connect.CodeInvalidArgument, errors.New("task.id: not a UUID")), ExitUsage, "task run kvm-09 start-vm: task.id: not a UUID"},
	}
	for _, tc := range tests {
		dir := shortDir(t)
		fake := newTaskFake()
		close(fake.watchOpen)
		fake.createErr = tc.err
		serveTasks(t, dir, fake)
		_, errOut, code := runCLI(t, dir, "task", "run", "kvm-09", "start-vm", "web")
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "may or may not") {
			t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.want)
		}
	}
}

// collect-diagnostics --wait -O FILE saves the bundle (0600) once the
// task succeeded, checked against the size and digest the node reported;
// a bundle that does not match is not saved.
func TestTaskRunSavesBundle(t *testing.T) {
	bundle := []byte(strings.Repeat("diagnostics ", 40000))
	sum := sha256.Sum256(bundle)
	chunks := []*directorv1.TaskDataChunk{{Offset: 0, Data: bundle[:256<<10]}, {Offset: 256 << 10, Data: bundle[256<<10:]}}
	for _, tc := range []struct {
		name   string
		sha    string
		chunks []*directorv1.TaskDataChunk
		want   string // in stderr; "" saved
	}{
		{"saved", hex.EncodeToString(sum[:]), chunks, ""},
		{"digest differs", strings.Repeat("0", 64), chunks, "the node reported"},
		{"gap", hex.EncodeToString(sum[:]), chunks[1:], "chunk at offset 262144, want 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			fake := newTaskFake()
			done := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_SUCCEEDED)
			done.Kind, done.Summary = "collect-diagnostics", "collect-diagnostics"
			done.Result = &directorv1.TaskResult{Result: &directorv1.TaskResult_Diagnostics{Diagnostics: &directorv1.DiagnosticsResult{
				SizeBytes: int64(len(bundle)), Sha256: tc.sha}}}
			fake.events = []*directorv1.TaskInfo{done}
			fake.data = tc.chunks
			serveTasks(t, dir, fake)
			path := filepath.Join(dir, "bundle.tar.gz")
			_, errOut, code := runCLI(t, dir, "task", "run", "kvm-01", "collect-diagnostics", "--wait", "-O", path)
			if tc.want != "" {
				if code != ExitError || !strings.Contains(errOut, tc.want) {
					t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, ExitError, tc.want)
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: %v; want nothing saved", path, err)
				}
				return
			}
			if code != ExitOK {
				t.Fatalf("exit %d; stderr %s", code, errOut)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != string(bundle) {
				t.Fatalf("%s: %d bytes, %v; want the bundle's %d", path, len(got), err, len(bundle))
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v; want 0600", path, st.Mode().Perm())
			}
		})
	}
}

func testTasks() []*directorv1.TaskInfo {
	a := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_SUCCEEDED)
	a.Log = []string{"starting web", "web running, qemu pid 4242"}
	a.Result = &directorv1.TaskResult{Result: &directorv1.TaskResult_Vm{Vm: &directorv1.VMResult{Uid: "0b3e9c1a-2d4f-4a6b-8c0d-1e2f3a4b5c6d",
		Name: "web", Phase: "Running"}}}
	b := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_RUNNING)
	b.Id, b.Kind, b.Summary = "2c0ffee0-aaaa-4bbb-8ccc-000000000002", "pull-image", "pull-image debian-12"
	b.CreatedAtUnixMs = ms(testNow.Add(-time.Minute))
	b.Progress = &directorv1.Progress{Done: 300 << 20, Total: 1 << 30, Unit: "bytes"}
	c := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_FAILED)
	c.Id, c.Kind, c.Summary, c.NodeId, c.NodeHostname = "3dead000-bbbb-4ccc-8ddd-000000000003", "create-vm", "create-vm db", testNodes()[0].Id, "kvm-02"
	c.CreatedAtUnixMs = ms(testNow.Add(-2 * time.Hour))
	c.Failure = &directorv1.TaskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT, Message: "invalid virtual machine",
		Fields: []*directorv1.FieldError{{Field: "spec.memoryMiB", Value: "1", Message: "must be at least 64"}}}
	d := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_PENDING)
	d.Id, d.Kind, d.Summary, d.CancelRequested = "4feed000-cccc-4ddd-8eee-000000000004", "stop-vm", "stop-vm web", true
	d.CreatedAtUnixMs, d.UpdatedAtUnixMs, d.ReplicaId, d.DispatchUs = ms(testNow.Add(-5*time.Second)), 0, "", 0
	return []*directorv1.TaskInfo{c, a, d, b}
}

func TestTaskListGolden(t *testing.T) {
	for _, format := range []string{output.Table, output.JSON, output.YAML} {
		t.Run(format, func(t *testing.T) {
			var b strings.Builder
			if err := renderTaskList(&b, format, testTasks(), clk); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, b.String())
		})
	}
}

func TestTaskShowGolden(t *testing.T) {
	for i, task := range testTasks() {
		for _, format := range []string{output.Table, output.JSON} {
			t.Run(fmt.Sprintf("%d-%s-%s", i, task.Kind, format), func(t *testing.T) {
				var b strings.Builder
				if err := renderTaskShow(&b, format, task, clk); err != nil {
					t.Fatal(err)
				}
				testutil.Golden(t, b.String())
			})
		}
	}
}

// The JSON promised to scripts for a task: TaskInfo's fields in
// camelCase, times RFC 3339 or null.
func TestTaskJSONContract(t *testing.T) {
	var b strings.Builder
	if err := renderTaskList(&b, output.JSON, testTasks(), clk); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatal(err)
	}
	for _, task := range got {
		for _, k := range []string{"id", "nodeId", "nodeHostname", "kind", "summary", "phase", "createdAt", "createdBy", "deadline",
			"cancelRequested", "progress", "log", "failure", "result", "updatedAt", "replicaId", "dispatchUs"} {
			if _, ok := task[k]; !ok {
				t.Errorf("task %v has no %q", task["id"], k)
			}
		}
	}
}

// task list's filters reach the director: --node resolved to its id,
// phases by name, each once.
func TestTaskListFilters(t *testing.T) {
	dir := shortDir(t)
	fake := newTaskFake()
	serveTasks(t, dir, fake)
	_, errOut, code := runCLI(t, dir, "task", "list", "--node", "kvm-03", "--phase", "Running,queued", "--phase", "running", "--limit", "5")
	if code != ExitOK {
		t.Fatalf("exit %d; stderr %s", code, errOut)
	}
	want := &directorv1.ListTasksRequest{Node: "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9", Limit: 5,
		Phases: []directorv1.TaskPhase{directorv1.TaskPhase_TASK_PHASE_RUNNING, directorv1.TaskPhase_TASK_PHASE_QUEUED}}
	if !proto.Equal(fake.listReq, want) {
		t.Errorf("ListTasks %v; want %v", fake.listReq, want)
	}
}

func TestTaskShowCancel(t *testing.T) {
	dir := shortDir(t)
	fake := newTaskFake()
	fake.getTask = testTaskInfo(directorv1.TaskPhase_TASK_PHASE_RUNNING)
	serveTasks(t, dir, fake)
	out, errOut, code := runCLI(t, dir, "task", "cancel", "7E57A5C0")
	if code != ExitOK || fake.cancelReq.GetId() != "7e57a5c0" {
		t.Fatalf("exit %d, cancel %v; stderr %s", code, fake.cancelReq, errOut)
	}
	if want := "task 7e57a5c0-1111-4222-8333-444455556666: cancel requested (Running; task show 7e57a5c0 says when it ends)\n"; out != want {
		t.Errorf("stdout %q; want %q", out, want)
	}
	out, _, code = runCLI(t, dir, "task", "show", "7e57a5c0", "-o", "json")
	if code != ExitOK || !strings.Contains(out, `"phase": "Running"`) {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	fake.getTask = nil
	_, errOut, code = runCLI(t, dir, "task", "show", "7e57a5c1")
	if want := `task show 7e57a5c1: task "7e57a5c1": not found (virt-director task list)`; code != ExitError || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, ExitError, want)
	}
}

func testVMs() *directorv1.ListVMsResponse {
	n1, n2 := testNodes()[1], testNodes()[0]
	at := ms(testNow.Add(-3 * time.Second))
	return &directorv1.ListVMsResponse{Vms: []*directorv1.NodeVM{
		{NodeId: n2.Id, NodeHostname: n2.Hostname, Uid: "7c8d9e0f-1a2b-4c3d-8e4f-5a6b7c8d9e0f", Name: "db-01", Class: "MANAGED", Phase: "Stopped",
			DisplayPhase: "unknown (last seen Stopped at 2026-09-01 11:54:50)", Generation: 3, ObservedGeneration: 3, Cpus: 2, MemoryMib: 2048,
			ReportedAtUnixMs: ms(testNow.Add(-5 * time.Minute))},
		{NodeId: n1.Id, NodeHostname: n1.Hostname, Uid: "0b3e9c1a-2d4f-4a6b-8c0d-1e2f3a4b5c6d", Name: "web", Class: "MANAGED", Phase: "Running",
			DisplayPhase: "Running", Generation: 2, ObservedGeneration: 2, DirectorGeneration: "1", Cpus: 1, MemoryMib: 512, ReportedAtUnixMs: at},
		{NodeId: n1.Id, NodeHostname: n1.Hostname, Uid: "a1b2c3d4-0000-4000-8000-00000000000e", Name: "legacy", Class: "EXTERNAL", Phase: "Running",
			DisplayPhase: "Running", Source: "qemu", Cpus: 1, MemoryMib: 256, ReportedAtUnixMs: at},
		{NodeId: n1.Id, NodeHostname: n1.Hostname, Uid: "b2c3d4e5-0000-4000-8000-00000000000f", Name: "", Class: "ORPHANED", Phase: "Unknown",
			DisplayPhase: "Unknown", Reason: "a VM directory without a manifest", ReportedAtUnixMs: at},
	}, Count: 4, NodesWithoutInventory: []string{"kvm-04"}}
}

func TestVMListGolden(t *testing.T) {
	for _, format := range []string{output.Table, output.JSON, output.YAML} {
		t.Run(format, func(t *testing.T) {
			var b strings.Builder
			if err := renderVMList(&b, format, testVMs().GetVms()); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, b.String())
		})
	}
}

// The JSON promised to scripts for vm list.
func TestVMListJSONContract(t *testing.T) {
	var b strings.Builder
	if err := renderVMList(&b, output.JSON, testVMs().GetVms()); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d VMs; want 4", len(got))
	}
	for _, v := range got {
		for _, k := range []string{"node", "nodeId", "uid", "name", "class", "phase", "displayPhase", "generation", "observedGeneration",
			"directorGeneration", "cpus", "memoryMiB", "reportedAt"} {
			if _, ok := v[k]; !ok {
				t.Errorf("vm %v has no %q", v["uid"], k)
			}
		}
		if v["name"] == "web" && v["directorGeneration"] != "1" || v["name"] == "db-01" && v["directorGeneration"] != nil {
			t.Errorf("vm %v: directorGeneration %v", v["name"], v["directorGeneration"])
		}
	}
}

// vm list --node asks for that node's id; nodes without an inventory are
// named on stderr, not in the data.
func TestVMListCommand(t *testing.T) {
	dir := shortDir(t)
	fake := newTaskFake()
	fake.vms = testVMs()
	serveTasks(t, dir, fake)
	out, errOut, code := runCLI(t, dir, "vm", "list", "--node", "kvm-01", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d; stderr %s", code, errOut)
	}
	if fake.vmsReq.GetNode() != "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d" {
		t.Errorf("ListVMs node %q; want kvm-01's id", fake.vmsReq.GetNode())
	}
	if !strings.Contains(errOut, "no inventory yet from 1 node(s): kvm-04") || strings.Contains(out, "kvm-04") {
		t.Errorf("stdout %q, stderr %q; want kvm-04 named on stderr only", out, errOut)
	}
}

func TestNodeResync(t *testing.T) {
	dir := shortDir(t)
	fake := newTaskFake()
	serveTasks(t, dir, fake)
	out, errOut, code := runCLI(t, dir, "node", "resync", "kvm-03")
	if code != ExitOK || fake.resyncReq.GetId() != "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9" || fake.resyncReq.GetAll() {
		t.Fatalf("exit %d, request %v; stderr %s", code, fake.resyncReq, errOut)
	}
	if out != "resync asked of 1 node(s): kvm-03\n" {
		t.Errorf("stdout %q", out)
	}
	out, _, code = runCLI(t, dir, "node", "resync", "--all", "-o", "json")
	if code != ExitOK || !fake.resyncReq.GetAll() || fake.resyncReq.GetId() != "" {
		t.Fatalf("exit %d, request %v", code, fake.resyncReq)
	}
	var got struct{ Nodes []string }
	if err := json.Unmarshal([]byte(out), &got); err != nil || strings.Join(got.Nodes, " ") != "kvm-01 kvm-03" {
		t.Errorf("stdout %q (%v)", out, err)
	}
	_, errOut, code = runCLI(t, dir, "node", "resync", "kvm-99")
	if code != ExitError || !strings.Contains(errOut, `node "kvm-99": no such node`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestReplicaListGolden(t *testing.T) {
	replicas := []*directorv1.ReplicaInfo{
		{Id: "r2", Advertise: "director-b.example:9443", Version: "0.14.0", StartedAtUnixMs: ms(testNow.Add(-3 * time.Hour)), Sessions: 480},
		{Id: "r1", Advertise: "director-a.example:9443", Version: "0.14.0", StartedAtUnixMs: ms(testNow.Add(-26 * time.Hour)), Leader: true, Sessions: 520},
	}
	for _, format := range []string{output.Table, output.JSON} {
		t.Run(format, func(t *testing.T) {
			var b strings.Builder
			if err := renderReplicaList(&b, format, replicas, clk); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, b.String())
		})
	}
	dir := shortDir(t)
	fake := newTaskFake()
	fake.replicas = replicas
	serveTasks(t, dir, fake)
	out, errOut, code := runCLI(t, dir, "replica", "list")
	if code != ExitOK || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "director-a.example:9443") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestNewLines(t *testing.T) {
	tests := []struct {
		prev, cur, want []string
	}{
		{nil, []string{"a"}, []string{"a"}},
		{[]string{"a"}, []string{"a", "b"}, []string{"b"}},
		{[]string{"a", "b"}, []string{"a", "b"}, nil},
		{[]string{"a", "b", "c"}, []string{"b", "c", "d"}, []string{"d"}}, // the tail of 100 moved on
		{[]string{"a"}, []string{"x", "y"}, []string{"x", "y"}},
	}
	for _, tc := range tests {
		if got := newLines(tc.prev, tc.cur); !slices.Equal(got, tc.want) {
			t.Errorf("newLines(%q, %q) = %q; want %q", tc.prev, tc.cur, got, tc.want)
		}
	}
}

// A watch that ends before the task does: the task is asked for once
// more; still running, the error says it goes on. An interrupted --wait
// leaves the task running and says so (exit 130).
func TestTaskRunWaitEnds(t *testing.T) {
	running := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_RUNNING)
	done := testTaskInfo(directorv1.TaskPhase_TASK_PHASE_SUCCEEDED)
	t.Run("watch cut, task ended", func(t *testing.T) {
		dir := shortDir(t)
		fake := newTaskFake()
		fake.events, fake.getTask = []*directorv1.TaskInfo{running}, done
		serveTasks(t, dir, fake)
		out, errOut, code := runCLI(t, dir, "task", "run", "kvm-01", "start-vm", "web", "--wait")
		if code != ExitOK || !strings.Contains(out, "Phase:     Succeeded") {
			t.Errorf("exit %d, stdout %q, stderr %q; want 0 and the task Succeeded", code, out, errOut)
		}
	})
	t.Run("watch cut, task runs", func(t *testing.T) {
		dir := shortDir(t)
		fake := newTaskFake()
		fake.events, fake.getTask = []*directorv1.TaskInfo{running}, running
		serveTasks(t, dir, fake)
		out, errOut, code := runCLI(t, dir, "task", "run", "kvm-01", "start-vm", "web", "--wait")
		id := fake.created[0].GetTask().GetId()
		want := "the director ended the watch before the task ended; it goes on: virt-director task show " + id
		if code != ExitError || !strings.Contains(errOut, want) || out != "" {
			t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, out, errOut, ExitError, want)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		dir := shortDir(t)
		fake := newTaskFake()
		fake.events, fake.hold, fake.sent = []*directorv1.TaskInfo{running}, true, make(chan struct{})
		serveTasks(t, dir, fake)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-fake.sent; time.Sleep(100 * time.Millisecond); cancel() }()
		var out, errOut strings.Builder
		env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, Now: func() time.Time { return testNow }, Loc: time.UTC}
		code := runEnv(ctx, []string{"--data", dir, "task", "run", "kvm-01", "start-vm", "web", "--wait"}, env)
		id := fake.created[0].GetTask().GetId()
		if want := "interrupted: task " + id + " goes on"; code != ExitCanceled || !strings.Contains(errOut.String(), want) {
			t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), ExitCanceled, want)
		}
	})
}

// task run completes KIND with the kinds of the table.
func TestTaskRunCompletesKinds(t *testing.T) {
	dir := shortDir(t)
	out, errOut, code := runCLI(t, dir, "__complete", "task", "run", "kvm-01", "")
	if code != ExitOK {
		t.Fatalf("exit %d; stderr %s", code, errOut)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) < 1 || !slices.Equal(got[:len(got)-1], kindNames()) {
		t.Errorf("completions %q; want %q and the directive", got, kindNames())
	}
}

// The command line knows every kind the protocol has, by its one name.
func TestTaskKindsAreTheProtocols(t *testing.T) {
	var names []string
	for _, k := range kindSpecs {
		names = append(names, k.name)
	}
	if !slices.Equal(names, taskkind.All) {
		t.Errorf("task run's kinds %v; want taskkind.All %v", names, taskkind.All)
	}
}
