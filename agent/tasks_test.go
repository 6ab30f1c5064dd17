package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/vm"
)

// fakeSessions is a scripted director AgentService over real TLS (the
// director's chain for 127.0.0.1, HTTP/2): it answers Register and
// heartbeats, records what the agent sends, sends what a test pushes and
// cuts sessions on demand. The real director's task path is tested in
// director/ and the integration tests.
type fakeSessions struct {
	directorv1connect.UnimplementedAgentServiceHandler
	ca   *testCA
	addr string
	// onRegister, when set, gives the messages sent right after
	// Registered in session n (1, 2, ...).
	onRegister func(n int) []*directorv1.SessionResponse
	// noAck: TaskData is not acknowledged
	noAck atomic.Bool
	// directors is Registered.directors
	directors []string
	srv       *httptest.Server

	mu       sync.Mutex
	changed  chan struct{}
	sessions int
	regs     []*directorv1.Register
	statuses []*directorv1.TaskStatus
	data     []*directorv1.TaskData
	leaves   int
	invs     []*directorv1.Inventory
	deltas   []*directorv1.InventoryDelta
	send     chan *directorv1.SessionResponse // to the current session
	cut      chan struct{}                    // closed: the current session ends
}

func startFakeSessions(t *testing.T) *fakeSessions {
	t.Helper()
	return startFakeSessionsCA(t, newTestCA(t))
}

// startFakeSessionsCA is a fake director of ca: several of one CA are
// replicas of one director.
func startFakeSessionsCA(t *testing.T, ca *testCA) *fakeSessions {
	t.Helper()
	f := &fakeSessions{ca: ca, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(directorv1connect.NewAgentServiceHandler(f))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{f.ca.serving(t)}, ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f.addr = srv.Listener.Addr().String()
	f.srv = srv
	return f
}

// kill is a replica that dies: its listener and connections go.
func (f *fakeSessions) kill() {
	f.srv.Listener.Close()
	f.cutSession()
	f.srv.CloseClientConnections()
}

func (f *fakeSessions) Leave(ctx context.Context, req *connect.Request[directorv1.LeaveRequest]) (*connect.Response[directorv1.LeaveResponse], error) {
	f.mu.Lock()
	f.leaves++
	f.mu.Unlock()
	return connect.NewResponse(&directorv1.LeaveResponse{}), nil
}

func (f *fakeSessions) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeSessions) Session(ctx context.Context, st *connect.BidiStream[directorv1.SessionRequest, directorv1.SessionResponse]) error {
	first, err := st.Receive()
	if err != nil {
		return err
	}
	if first.GetRegister() == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("want Register first"))
	}
	send := make(chan *directorv1.SessionResponse, 256)
	cut := make(chan struct{})
	f.mu.Lock()
	f.sessions++
	n := f.sessions
	f.regs = append(f.regs, first.GetRegister())
	f.send, f.cut = send, cut
	f.notify()
	f.mu.Unlock()
	// Sends are serialised and none is made once the handler has returned
	// (the receiving goroutine acks heartbeats; a Send racing connect's
	// Close of the stream is a data race), as in the director.
	var (
		sendMu   sync.Mutex
		returned bool
	)
	out := func(m *directorv1.SessionResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		if returned {
			return errors.New("session over")
		}
		return st.Send(m)
	}
	defer func() {
		sendMu.Lock()
		returned = true
		sendMu.Unlock()
	}()
	if err := out(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Registered{Registered: &directorv1.Registered{
		NodeId: testNodeID, HeartbeatIntervalMs: 50, ReportIntervalMs: 60000, Directors: f.directors}}}); err != nil {
		return err
	}
	if f.onRegister != nil {
		for _, m := range f.onRegister(n) {
			if err := out(m); err != nil {
				return err
			}
		}
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := st.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			switch msg := m.GetMsg().(type) {
			case *directorv1.SessionRequest_Heartbeat:
				_ = out(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_HeartbeatAck{HeartbeatAck: &directorv1.HeartbeatAck{Seq: msg.Heartbeat.GetSeq()}}})
			case *directorv1.SessionRequest_TaskStatus:
				f.mu.Lock()
				f.statuses = append(f.statuses, msg.TaskStatus)
				f.notify()
				f.mu.Unlock()
			case *directorv1.SessionRequest_TaskData:
				f.mu.Lock()
				f.data = append(f.data, msg.TaskData)
				f.notify()
				f.mu.Unlock()
				if !f.noAck.Load() {
					d := msg.TaskData
					_ = out(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_TaskDataAck{TaskDataAck: &directorv1.TaskDataAck{
						TaskId: d.GetTaskId(), Offset: d.GetOffset() + uint64(len(d.GetData()))}}})
				}
			case *directorv1.SessionRequest_Inventory:
				f.mu.Lock()
				f.invs = append(f.invs, msg.Inventory)
				f.notify()
				f.mu.Unlock()
			case *directorv1.SessionRequest_InventoryDelta:
				f.mu.Lock()
				f.deltas = append(f.deltas, msg.InventoryDelta)
				f.notify()
				f.mu.Unlock()
			case *directorv1.SessionRequest_Goodbye:
				recvErr <- nil
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-cut:
			return connect.NewError(connect.CodeUnavailable, errors.New("cut by the test"))
		case err := <-recvErr:
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		case m := <-send:
			if err := out(m); err != nil {
				return err
			}
		}
	}
}

// waitSessions waits for the nth session.
func (f *fakeSessions) waitSessions(t *testing.T, n int) {
	t.Helper()
	f.wait(t, fmt.Sprintf("session %d", n), func() bool { return f.sessions >= n })
}

// wait waits until ok (called under f.mu) holds.
func (f *fakeSessions) wait(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		f.mu.Lock()
		done, ch := ok(), f.changed
		f.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			f.mu.Lock()
			defer f.mu.Unlock()
			t.Fatalf("not %s after 20 s; statuses: %v", what, f.statuses)
		}
	}
}

// sendTask sends t to the current session.
func (f *fakeSessions) push(t *testing.T, m *directorv1.SessionResponse) {
	t.Helper()
	f.mu.Lock()
	ch := f.send
	f.mu.Unlock()
	if ch == nil {
		t.Fatal("no session to send to")
	}
	ch <- m
}

func (f *fakeSessions) sendTask(t *testing.T, task *directorv1.Task) {
	t.Helper()
	f.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Task{Task: task}})
}

func (f *fakeSessions) cutSession() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut != nil {
		close(f.cut)
		f.cut = nil
	}
}

// of returns the statuses received for a task, in order.
func (f *fakeSessions) of(id string) []*directorv1.TaskStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ofLocked(id)
}

func (f *fakeSessions) ofLocked(id string) []*directorv1.TaskStatus {
	var out []*directorv1.TaskStatus
	for _, s := range f.statuses {
		if s.GetTaskId() == id {
			out = append(out, s)
		}
	}
	return out
}

// waitPhase waits for a status of task id in phase p and returns it.
func (f *fakeSessions) waitPhase(t *testing.T, id string, p directorv1.TaskPhase) *directorv1.TaskStatus {
	t.Helper()
	var got *directorv1.TaskStatus
	f.wait(t, fmt.Sprintf("task %s %s", id, p), func() bool {
		for _, s := range f.ofLocked(id) {
			if s.GetPhase() == p {
				got = s
				return true
			}
		}
		return false
	})
	return got
}

// waitTerminal waits for task id's first terminal status.
func (f *fakeSessions) waitTerminal(t *testing.T, id string) *directorv1.TaskStatus {
	t.Helper()
	var got *directorv1.TaskStatus
	f.wait(t, "task "+id+" ended", func() bool {
		for _, s := range f.ofLocked(id) {
			if terminalPhase(s.GetPhase()) {
				got = s
				return true
			}
		}
		return false
	})
	return got
}

// taskAgent is a temp-root host enrolled with f, with Run started.
func taskAgent(t *testing.T, f *fakeSessions) *host.Host {
	t.Helper()
	h := testHost(t)
	prepareAgent(t, f, h)
	startRun(t, h, RunOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	return h
}

func prepareAgent(t *testing.T, f *fakeSessions, h *host.Host) {
	t.Helper()
	enrolled(t, h.Layout, f.ca, time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour))
	setDirector(t, h.Layout, f.addr)
}

func newID() string { return uuid.NewString() }

func pullTask(id, url, name, sha string, deadline time.Duration) *directorv1.Task {
	return &directorv1.Task{Id: id, DeadlineInMs: deadline.Milliseconds(),
		Kind: &directorv1.Task_PullImage{PullImage: &directorv1.PullImage{Url: url, Name: name, Sha256: sha}}}
}

// imageServer serves size bytes in chunk pieces, one every gap; it
// counts the requests. hold, when set, is waited on before each piece.
type imageServer struct {
	*httptest.Server
	data     []byte
	requests atomic.Int64
}

func startImageServer(t *testing.T, size, chunk int, gap time.Duration) *imageServer {
	t.Helper()
	s := &imageServer{data: bytes.Repeat([]byte("virtcon!"), size/8)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		w.Header().Set("Content-Length", fmt.Sprint(len(s.data)))
		for off := 0; off < len(s.data); off += chunk {
			if _, err := w.Write(s.data[off:min(off+chunk, len(s.data))]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(gap):
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *imageServer) sha() string {
	sum := sha256.Sum256(s.data)
	return hex.EncodeToString(sum[:])
}

// imagesLeft lists what is in the images directory.
func imagesLeft(t *testing.T, h *host.Host) []string {
	t.Helper()
	ents, err := os.ReadDir(h.Layout.ImagesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func reasonOf(s *directorv1.TaskStatus) directorv1.TaskFailureReason {
	return s.GetFailure().GetReason()
}

// The agent advertises what it runs; a Task with an empty oneof (a kind
// from a newer director: here a field this protocol does not know) and a
// kind it does not advertise fail UNSUPPORTED_KIND at once, journalled.
func TestTaskUnknownKindRefused(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := taskAgent(t, f)
	f.waitSessions(t, 1)
	f.mu.Lock()
	kinds := f.regs[0].GetTaskKinds()
	f.mu.Unlock()
	if !contains(kinds, KindCollectDiagnostics) || contains(kinds, KindApplyNetwork) && applyNetworkFunc == nil {
		t.Errorf("task_kinds %v: want collect-diagnostics, and apply-network only with its code", kinds)
	}

	// a Task carrying kind field 18, unknown to this protocol
	id := newID()
	b, err := proto.Marshal(&directorv1.Task{Id: id, DeadlineInMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 18, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte{0x0a, 0x03, 'w', 'e', 'b'})
	var unknown directorv1.Task
	if err := proto.Unmarshal(b, &unknown); err != nil {
		t.Fatal(err)
	}
	if unknown.GetKind() != nil {
		t.Fatalf("the test's task has kind %T; want none", unknown.GetKind())
	}
	f.sendTask(t, &unknown)
	st := f.waitTerminal(t, id)
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_FAILED || reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_UNSUPPORTED_KIND ||
		!strings.Contains(st.GetFailure().GetMessage(), KindCollectDiagnostics) || st.GetSeq() != 1 {
		t.Errorf("unknown kind: %v; want FAILED UNSUPPORTED_KIND seq 1 naming what it runs", st)
	}
	if _, err := os.Stat(filepath.Join(TasksDir(h.Layout), id+".json")); err != nil {
		t.Errorf("the refused task is not journalled: %v", err)
	}

	// a kind this agent does not advertise
	if !contains(kinds, KindApplyNetwork) {
		id2 := newID()
		f.sendTask(t, &directorv1.Task{Id: id2, DeadlineInMs: 60000, Kind: &directorv1.Task_ApplyNetwork{ApplyNetwork: &directorv1.ApplyNetwork{}}})
		if st := f.waitTerminal(t, id2); reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_UNSUPPORTED_KIND {
			t.Errorf("an unadvertised kind: %v; want UNSUPPORTED_KIND", st)
		}
	}
	// no deadline: refused, naming the field
	id3 := newID()
	f.sendTask(t, &directorv1.Task{Id: id3, Kind: &directorv1.Task_CollectDiagnostics{CollectDiagnostics: &directorv1.CollectDiagnostics{}}})
	if st := f.waitTerminal(t, id3); reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT ||
		len(st.GetFailure().GetFields()) != 1 || st.GetFailure().GetFields()[0].GetField() != "deadline_in_ms" {
		t.Errorf("a task without a deadline: %v; want INVALID_ARGUMENT on deadline_in_ms", st)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// requireKind skips a test whose kind this host does not run.
func requireKind(t *testing.T, f *fakeSessions, kind string) {
	t.Helper()
	f.waitSessions(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !contains(f.regs[0].GetTaskKinds(), kind) {
		t.Skipf("this host does not run %s (task_kinds %v): QEMU's binary check did not pass", kind, f.regs[0].GetTaskKinds())
	}
}

// A pull from a local HTTP server: Queued, Running, at least two
// progress statuses with bytes (throttled: at most about 4 a second), then
// Succeeded with the image's sha256; seqs grow. The outbox coalesces a
// task's statuses not yet sent (the newest replaces the older), so on a
// loaded machine Queued may go unseen behind Running (it did once in CI),
// and a seq may be skipped, never repeated or reversed.
func TestTaskPullImageProgress(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := taskAgent(t, f)
	requireKind(t, f, KindPullImage)
	srv := startImageServer(t, 16<<20, 1<<20, 60*time.Millisecond)
	id := newID()
	start := time.Now()
	f.sendTask(t, pullTask(id, srv.URL+"/disk.img", "base", srv.sha(), time.Minute))
	st := f.waitTerminal(t, id)
	took := time.Since(start)
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED {
		t.Fatalf("pull: %v; want SUCCEEDED", st)
	}
	if img := st.GetResult().GetImage(); img.GetName() != "base" || img.GetSha256() != srv.sha() || img.GetSizeBytes() != int64(len(srv.data)) {
		t.Errorf("result %v; want base, %s, %d bytes", img, srv.sha(), len(srv.data))
	}
	all := f.of(id)
	progress := 0
	for i, s := range all {
		if i > 0 && s.GetSeq() <= all[i-1].GetSeq() {
			t.Errorf("status %d has seq %d after %d; want it to grow", i, s.GetSeq(), all[i-1].GetSeq())
		}
		if s.GetPhase() == directorv1.TaskPhase_TASK_PHASE_RUNNING && s.GetProgress().GetDone() > 0 {
			progress++
			if s.GetProgress().GetUnit() != "bytes" || s.GetProgress().GetTotal() != int64(len(srv.data)) {
				t.Errorf("progress %v; want bytes of %d", s.GetProgress(), len(srv.data))
			}
		}
	}
	switch first := all[0]; {
	case first.GetPhase() == directorv1.TaskPhase_TASK_PHASE_QUEUED && first.GetSeq() == 1:
		if all[1].GetPhase() != directorv1.TaskPhase_TASK_PHASE_RUNNING {
			t.Errorf("status after QUEUED %v; want RUNNING", all[1].GetPhase())
		}
	case first.GetPhase() == directorv1.TaskPhase_TASK_PHASE_RUNNING && first.GetSeq() > 1:
		// Queued coalesced into it before a send
	default:
		t.Errorf("first status %v seq %d; want QUEUED seq 1, or RUNNING (Queued coalesced)", first.GetPhase(), first.GetSeq())
	}
	if progress < 2 {
		t.Errorf("%d progress statuses; want at least 2", progress)
	}
	if limit := int(took/progressInterval) + 2; progress > limit {
		t.Errorf("%d progress statuses in %s; want at most %d (4 a second)", progress, took, limit)
	}
	if !contains(imagesLeft(t, h), "base.img") {
		t.Errorf("images/ holds %v; want base.img", imagesLeft(t, h))
	}
	// the same image again under another task id (a journal lost with a
	// host reinstall): done, nothing downloaded; other bytes under the
	// name: CONFLICT
	before := srv.requests.Load()
	same := newID()
	f.sendTask(t, pullTask(same, srv.URL+"/disk.img", "base", srv.sha(), time.Minute))
	if st := f.waitTerminal(t, same); st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED || st.GetResult().GetImage().GetSha256() != srv.sha() {
		t.Errorf("pull of an image already there: %v; want SUCCEEDED with its sha256", st)
	}
	other := newID()
	f.sendTask(t, pullTask(other, srv.URL+"/disk.img", "base", strings.Repeat("cd", 32), time.Minute))
	if st := f.waitTerminal(t, other); reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_CONFLICT {
		t.Errorf("pull of other bytes under a taken name: %v; want CONFLICT", st)
	}
	if n := srv.requests.Load(); n != before {
		t.Errorf("%d more downloads for a name already taken; want none", n-before)
	}
}

// A bad sha256 fails CHECKSUM_MISMATCH and leaves nothing under images/.
func TestTaskPullImageBadChecksum(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := taskAgent(t, f)
	requireKind(t, f, KindPullImage)
	srv := startImageServer(t, 1<<20, 1<<20, 0)
	id := newID()
	f.sendTask(t, pullTask(id, srv.URL+"/disk.img", "base", strings.Repeat("ab", 32), time.Minute))
	st := f.waitTerminal(t, id)
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_FAILED || reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_CHECKSUM_MISMATCH {
		t.Errorf("pull with a wrong sha256: %v; want FAILED CHECKSUM_MISMATCH", st)
	}
	if left := imagesLeft(t, h); len(left) > 0 {
		t.Errorf("images/ holds %v after a failed pull; want nothing", left)
	}
}

// A cancel mid-pull: CANCELLED and no partial file under images/.
func TestTaskPullImageCancel(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := taskAgent(t, f)
	requireKind(t, f, KindPullImage)
	srv := startImageServer(t, 64<<20, 256<<10, 50*time.Millisecond)
	id := newID()
	f.sendTask(t, pullTask(id, srv.URL+"/disk.img", "base", "", 10*time.Minute))
	f.waitPhase(t, id, directorv1.TaskPhase_TASK_PHASE_RUNNING)
	// bytes are on disk: the partial file exists
	deadline := time.Now().Add(10 * time.Second)
	for len(imagesLeft(t, h)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(imagesLeft(t, h)) == 0 {
		t.Fatal("no partial file under images/ while pulling")
	}
	f.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_CancelTask{CancelTask: &directorv1.CancelTask{TaskId: id}}})
	st := f.waitTerminal(t, id)
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_CANCELLED {
		t.Errorf("pull after a cancel: %v; want CANCELLED", st)
	}
	if left := imagesLeft(t, h); len(left) > 0 {
		t.Errorf("images/ holds %v after a cancelled pull; want nothing", left)
	}
	// a cancel of an unknown or ended task is ignored
	f.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_CancelTask{CancelTask: &directorv1.CancelTask{TaskId: id}}})
	f.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_CancelTask{CancelTask: &directorv1.CancelTask{TaskId: newID()}}})
	time.Sleep(100 * time.Millisecond)
	if n := len(f.of(id)); f.of(id)[n-1].GetPhase() != directorv1.TaskPhase_TASK_PHASE_CANCELLED {
		t.Errorf("a status after the terminal one: %v", f.of(id)[n-1])
	}
}

// A 200 ms deadline passes mid-pull: FAILED DEADLINE_EXCEEDED, nothing
// left under images/.
func TestTaskDeadlineExceeded(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := taskAgent(t, f)
	requireKind(t, f, KindPullImage)
	srv := startImageServer(t, 64<<20, 256<<10, 50*time.Millisecond)
	id := newID()
	start := time.Now()
	f.sendTask(t, pullTask(id, srv.URL+"/disk.img", "base", "", 200*time.Millisecond))
	st := f.waitTerminal(t, id)
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_FAILED || reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_DEADLINE_EXCEEDED {
		t.Errorf("pull past its deadline: %v; want FAILED DEADLINE_EXCEEDED", st)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the deadline failure came after %s; want about 200 ms", took)
	}
	if left := imagesLeft(t, h); len(left) > 0 {
		t.Errorf("images/ holds %v after the deadline; want nothing", left)
	}
}

// A task redelivered after a reconnect (the director resends it on
// Register) runs once: one download; its statuses go on across the
// sessions with growing seqs, and a later redelivery gets the last
// status again.
func TestTaskRedeliveredRunsOnce(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	srv := startImageServer(t, 8<<20, 512<<10, 60*time.Millisecond)
	id := newID()
	task := pullTask(id, srv.URL+"/disk.img", "base", srv.sha(), time.Minute)
	f.onRegister = func(n int) []*directorv1.SessionResponse {
		if n == 1 {
			return nil
		}
		return []*directorv1.SessionResponse{{Msg: &directorv1.SessionResponse_Task{Task: task}}}
	}
	taskAgent(t, f)
	requireKind(t, f, KindPullImage)
	f.sendTask(t, task)
	f.waitPhase(t, id, directorv1.TaskPhase_TASK_PHASE_RUNNING)
	f.cutSession()
	f.waitSessions(t, 2)
	st := f.waitTerminal(t, id)
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED {
		t.Fatalf("redelivered pull: %v; want SUCCEEDED", st)
	}
	if n := srv.requests.Load(); n != 1 {
		t.Errorf("%d downloads; want 1", n)
	}
	var last uint64
	for _, s := range f.of(id) {
		if s.GetSeq() < last {
			t.Errorf("seq %d after %d", s.GetSeq(), last)
		}
		last = s.GetSeq()
	}
	// once more, after it ended: the terminal status again, no run
	before := len(f.of(id))
	f.sendTask(t, task)
	f.wait(t, "the last status resent", func() bool { return len(f.ofLocked(id)) > before })
	if again := f.of(id)[before]; again.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED || again.GetSeq() != st.GetSeq() {
		t.Errorf("redelivery after the end: %v; want the terminal status (seq %d) again", again, st.GetSeq())
	}
	time.Sleep(100 * time.Millisecond)
	if n := srv.requests.Load(); n != 1 {
		t.Errorf("%d downloads after the redelivery; want 1", n)
	}
}

// Tasks a previous process left Queued or Running fail AGENT_RESTARTED
// when Run starts (seq after the journalled one), and are never run again.
func TestTaskAgentRestarted(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := testHost(t)
	prepareAgent(t, f, h)
	j, err := openJournal(TasksDir(h.Layout), testLog(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := startImageServer(t, 1<<20, 1<<20, 0)
	id, done := newID(), newID()
	task := pullTask(id, srv.URL+"/disk.img", "base", "", time.Minute)
	for _, c := range []struct {
		id    string
		phase directorv1.TaskPhase
	}{{id, directorv1.TaskPhase_TASK_PHASE_RUNNING}, {done, directorv1.TaskPhase_TASK_PHASE_SUCCEEDED}} {
		if _, err := j.create(&jrecord{ID: c.id, Kind: KindPullImage, ReceivedAt: time.Now()},
			&directorv1.TaskStatus{TaskId: c.id, Seq: 2, Phase: c.phase}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	f.onRegister = func(n int) []*directorv1.SessionResponse {
		return []*directorv1.SessionResponse{{Msg: &directorv1.SessionResponse_Task{Task: task}}}
	}
	startRun(t, h, RunOptions{})
	st := f.waitTerminal(t, id)
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_FAILED || reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_AGENT_RESTARTED || st.GetSeq() != 3 {
		t.Errorf("interrupted task: %v; want FAILED AGENT_RESTARTED seq 3", st)
	}
	// the ended one is resent as it was (ended within the hour)
	if got := f.waitPhase(t, done, directorv1.TaskPhase_TASK_PHASE_SUCCEEDED); got.GetSeq() != 2 {
		t.Errorf("ended task resent as %v; want its SUCCEEDED seq 2", got)
	}
	time.Sleep(200 * time.Millisecond)
	if n := srv.requests.Load(); n != 0 {
		t.Errorf("the interrupted task was run again: %d downloads", n)
	}
	for _, s := range f.of(id) {
		if s.GetPhase() != directorv1.TaskPhase_TASK_PHASE_FAILED {
			t.Errorf("status %v of the interrupted task; want only FAILED", s)
		}
	}
}

// collect-diagnostics: the bundle goes as TaskData in order, at most 4
// chunks unacknowledged; Succeeded after the last ack with its size and
// sha256; the file is gone after.
func TestTaskCollectDiagnostics(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := taskAgent(t, f)
	f.waitSessions(t, 1)
	id := newID()
	f.sendTask(t, &directorv1.Task{Id: id, DeadlineInMs: 60000, Kind: &directorv1.Task_CollectDiagnostics{CollectDiagnostics: &directorv1.CollectDiagnostics{}}})
	st := f.waitTerminal(t, id)
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED {
		t.Fatalf("collect-diagnostics: %v; want SUCCEEDED", st)
	}
	f.mu.Lock()
	var bundle []byte
	for _, d := range f.data {
		if d.GetTaskId() != id {
			continue
		}
		if d.GetOffset() != uint64(len(bundle)) {
			t.Errorf("chunk at %d; want %d", d.GetOffset(), len(bundle))
		}
		if len(d.GetData()) > diagChunk {
			t.Errorf("chunk of %d bytes; want at most %d", len(d.GetData()), diagChunk)
		}
		bundle = append(bundle, d.GetData()...)
	}
	f.mu.Unlock()
	sum := sha256.Sum256(bundle)
	res := st.GetResult().GetDiagnostics()
	if res.GetSizeBytes() != int64(len(bundle)) || res.GetSha256() != hex.EncodeToString(sum[:]) || len(bundle) == 0 {
		t.Errorf("result %v; want the %d bytes sent and their sha256", res, len(bundle))
	}
	ents, _ := os.ReadDir(filepath.Join(h.Layout.AgentStateDir(), "diag"))
	if len(ents) != 0 {
		t.Errorf("diag dir holds %d files after the transfer; want none", len(ents))
	}
}

// Without acks the transfer stops after 4 chunks in flight and the task
// does not succeed.
func TestSendDataWindow(t *testing.T) {
	t.Parallel()
	out := newOutbox()
	tr := newTaskRunner(context.Background(), nil, testLog(t), nil, out, newSessionCtl(), time.Now)
	lt := &liveTask{id: newID()}
	data := make([]byte, 10*diagChunk+5)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	env := &taskEnv{Progress: func(int64, int64, string) {}}
	go func() { errc <- tr.sendData(ctx, env, lt, data) }()
	sent := takeN(out, diagInFlight)
	if len(sent) != diagInFlight {
		t.Fatalf("%d chunks sent without an ack; want %d", len(sent), diagInFlight)
	}
	// an ack of the first two frees two more
	tr.mu.Lock()
	tr.live[lt.id] = lt
	tr.mu.Unlock()
	tr.dataAck(&directorv1.TaskDataAck{TaskId: lt.id, Offset: 2 * diagChunk})
	if more := takeN(out, 2); len(more) != 2 || more[0].GetTaskData().GetOffset() != 4*diagChunk {
		t.Errorf("after an ack of 2 chunks: %d more, first at %d; want 2 from %d", len(more), more[0].GetTaskData().GetOffset(), 4*diagChunk)
	}
	// a new session: what was not acked goes again
	tr.registeredSessions()
	if again := takeN(out, diagInFlight); len(again) != diagInFlight || again[0].GetTaskData().GetOffset() != 2*diagChunk {
		t.Errorf("after a new session: %d chunks from %d; want %d from %d", len(again), again[0].GetTaskData().GetOffset(), diagInFlight, 2*diagChunk)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("sendData after cancel: %v", err)
	}
}

// sessionControl: Restart ends the session with a Goodbye and dials again
// at once; WaitUp returns only for a session dialled after its since,
// once Registered and heartbeat-acknowledged, with that connection's
// local address.
func TestSessionControlRestartWaitUp(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := testHost(t)
	prepareAgent(t, f, h)
	ctlc := make(chan sessionControl, 1)
	var dials atomic.Int64
	startRun(t, h, RunOptions{MinBackoff: 5 * time.Second, MaxBackoff: 10 * time.Second, DialContext: countingDial(&dials),
		control: func(c sessionControl) { ctlc <- c }})
	ctl := <-ctlc
	f.waitSessions(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := ctl.WaitUp(ctx, time.Time{})
	if err != nil || !strings.HasPrefix(first, "127.0.0.1:") {
		t.Fatalf("WaitUp for any session: %q, %v; want the first one's local address", first, err)
	}
	since := time.Now()
	// not up yet: the session now was dialled before since
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if _, err := ctl.WaitUp(short, since); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitUp for a session after since, none dialled: %v; want the deadline", err)
	}
	start := time.Now()
	ctl.Restart("network changed")
	addr, err := ctl.WaitUp(ctx, since)
	if err != nil {
		t.Fatalf("WaitUp after Restart: %v", err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("a new session came up %s after Restart; want at once, not after the 5 s backoff", took)
	}
	if addr == first || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("new session's local address %q; want a new connection's (the old was %q)", addr, first)
	}
	f.mu.Lock()
	n := f.sessions
	f.mu.Unlock()
	if n != 2 || dials.Load() != 2 {
		t.Errorf("%d sessions, %d dials after one Restart; want 2 and 2", n, dials.Load())
	}
}

// Four tasks run at once and 64 wait; one more is BUSY at once. The
// queue is FIFO: the first waiting task is the next to run.
func TestTaskQueueBusy(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	taskAgent(t, f)
	requireKind(t, f, KindPullImage)
	release := make(chan struct{})
	var started atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		http.Error(w, "gone", http.StatusGone)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	var ids []string
	for i := range taskWorkers + taskQueueMax + 1 {
		id := newID()
		ids = append(ids, id)
		f.sendTask(t, pullTask(id, srv.URL+"/x", fmt.Sprintf("img%d", i), "", time.Minute))
	}
	last := ids[len(ids)-1]
	st := f.waitTerminal(t, last)
	if reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_BUSY {
		t.Errorf("task %d: %v; want FAILED BUSY", len(ids), st)
	}
	for _, id := range ids[:taskWorkers] {
		f.waitPhase(t, id, directorv1.TaskPhase_TASK_PHASE_RUNNING)
	}
	// (the vm package serialises pulls on its store lock: one downloads)
	if n := started.Load(); n < 1 {
		t.Errorf("%d downloads running; want one", n)
	}
	for _, id := range ids[taskWorkers : len(ids)-1] {
		if s := f.of(id); len(s) != 1 || s[0].GetPhase() != directorv1.TaskPhase_TASK_PHASE_QUEUED {
			t.Fatalf("waiting task: %v; want only QUEUED", s)
		}
	}
	// one running task cancelled: the first waiting one runs next
	f.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_CancelTask{CancelTask: &directorv1.CancelTask{TaskId: ids[0]}}})
	f.waitPhase(t, ids[taskWorkers], directorv1.TaskPhase_TASK_PHASE_RUNNING)
	if s := f.of(ids[taskWorkers+1]); len(s) != 1 {
		t.Errorf("the second waiting task ran before the first: %v", s)
	}
}

// create-vm goes through the host's admission (a bad field fails
// INVALID_ARGUMENT naming it) and stamps the director's generation;
// delete-vm removes it; the host services' own INFO lines are the tasks'
// log lines, the manifest is in no status.
func TestTaskCreateDeleteVM(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := taskAgent(t, f)
	requireKind(t, f, KindCreateVM)
	kernel := filepath.Join(h.Layout.ImagesDir(), "vmlinuz")
	if err := os.MkdirAll(h.Layout.ImagesDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kernel, []byte("kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := "apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata:\n  name: web\nspec:\n  cpus: 1\n  memoryMiB: 64\n  boot:\n    kernel: " + kernel +
		"\n  cloudInit:\n    userData: \"#cloud-config\\npassword: s3cr3t-user-data\\n\"\n"
	// from afar, a kernel outside the images directory is refused
	bad := strings.Replace(manifest, kernel, "/etc/passwd", 1)
	badID := newID()
	f.sendTask(t, &directorv1.Task{Id: badID, DeadlineInMs: 60000, Kind: &directorv1.Task_CreateVm{CreateVm: &directorv1.CreateVM{Manifest: []byte(bad), DirectorGeneration: "1"}}})
	st := f.waitTerminal(t, badID)
	if reasonOf(st) != directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT || len(st.GetFailure().GetFields()) == 0 ||
		st.GetFailure().GetFields()[0].GetField() != "spec.boot.kernel" {
		t.Errorf("create with kernel /etc/passwd: %v; want INVALID_ARGUMENT on spec.boot.kernel", st)
	}

	id := newID()
	f.sendTask(t, &directorv1.Task{Id: id, DeadlineInMs: 60000, Kind: &directorv1.Task_CreateVm{CreateVm: &directorv1.CreateVM{Manifest: []byte(manifest), DirectorGeneration: "1"}}})
	st = f.waitTerminal(t, id)
	res := st.GetResult().GetVm()
	if st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED || res.GetName() != "web" || res.GetUid() == "" {
		t.Fatalf("create-vm: %v; want SUCCEEDED with web's uid", st)
	}
	e, err := h.VMs.Peek(context.Background(), "web")
	if err != nil || e.DirectorGeneration != "1" || e.UID != res.GetUid() {
		t.Errorf("the created VM: %+v, %v; want director generation 1, uid %s", e, err, res.GetUid())
	}
	del := newID()
	f.sendTask(t, &directorv1.Task{Id: del, DeadlineInMs: 60000, Kind: &directorv1.Task_DeleteVm{DeleteVm: &directorv1.DeleteVM{Vm: "web"}}})
	if st := f.waitTerminal(t, del); st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED || st.GetResult().GetVm().GetUid() != res.GetUid() {
		t.Errorf("delete-vm: %v; want SUCCEEDED naming uid %s", st, res.GetUid())
	}
	if _, err := h.VMs.Peek(context.Background(), "web"); !errors.Is(err, vm.ErrNotFound) {
		t.Errorf("after delete-vm: %v; want not found", err)
	}
	var lines []string
	for _, s := range append(f.of(id), f.of(del)...) {
		lines = append(lines, s.GetLog()...)
	}
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, "vm created") || !strings.Contains(joined, "vm deleted") {
		t.Errorf("log lines %q; want the host's 'vm created' and 'vm deleted'", lines)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.statuses {
		if b, _ := proto.Marshal(s); bytes.Contains(b, []byte("s3cr3t-user-data")) {
			t.Errorf("a status carries the cloud-init user data: %v", s)
		}
	}
}

// watchTask follows a task on the real director until it ends.
func watchTask(t *testing.T, d *directortest.Harness, id string) (*directorv1.TaskInfo, []*directorv1.TaskInfo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := d.Admin.WatchTask(ctx, connect.NewRequest(&directorv1.WatchTaskRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var seen []*directorv1.TaskInfo
	for s.Receive() {
		ti := s.Msg()
		seen = append(seen, ti)
		if terminalPhase(ti.GetPhase()) {
			return ti, seen
		}
	}
	t.Fatalf("watch of task %s ended without a terminal phase: %v (seen %v)", id, s.Err(), seen)
	return nil, nil
}

// End to end with the real director (directortest: TLS, etcd): the node
// advertises its kinds, a pull created on the admin API runs on the agent
// with progress and succeeds; a collect-diagnostics bundle reaches the
// director whole (GetTaskData matches the result's sha256).
func TestTasksRealDirector(t *testing.T) {
	t.Parallel()
	d := directortest.Start(t, shortIntervals)
	h := testHost(t)
	st := enrolHost(t, d, h)
	startRun(t, h, RunOptions{})
	var kinds []string
	waitFor(t, "the node's task kinds on the director", func() bool {
		kinds = d.Node(t, st.NodeID).GetNode().GetTaskKinds()
		return len(kinds) > 0
	})
	if !contains(kinds, KindCollectDiagnostics) {
		t.Fatalf("the director's node runs %v; want collect-diagnostics at least", kinds)
	}
	ctx := context.Background()
	if contains(kinds, KindPullImage) {
		srv := startImageServer(t, 12<<20, 1<<20, 40*time.Millisecond)
		id := newID()
		if _, err := d.Admin.CreateTask(ctx, connect.NewRequest(&directorv1.CreateTaskRequest{Node: st.NodeID,
			Task: pullTask(id, srv.URL+"/disk.img", "base", srv.sha(), time.Minute)})); err != nil {
			t.Fatalf("CreateTask: %v", err)
		}
		end, seen := watchTask(t, d, id)
		if end.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED || end.GetResult().GetImage().GetSha256() != srv.sha() {
			t.Fatalf("pull via the director: %v; want SUCCEEDED with the sha256", end)
		}
		progressed := false
		for _, ti := range seen {
			if ti.GetProgress().GetDone() > 0 && ti.GetProgress().GetUnit() == "bytes" {
				progressed = true
			}
		}
		if !progressed {
			t.Errorf("no progress in bytes seen on the director: %v", seen)
		}
	}
	id := newID()
	if _, err := d.Admin.CreateTask(ctx, connect.NewRequest(&directorv1.CreateTaskRequest{Node: st.NodeID,
		Task: &directorv1.Task{Id: id, DeadlineInMs: 60000, Kind: &directorv1.Task_CollectDiagnostics{CollectDiagnostics: &directorv1.CollectDiagnostics{}}}})); err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	end, _ := watchTask(t, d, id)
	if end.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED {
		t.Fatalf("collect-diagnostics via the director: %v; want SUCCEEDED", end)
	}
	s, err := d.Admin.GetTaskData(ctx, connect.NewRequest(&directorv1.GetTaskDataRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	var bundle []byte
	for s.Receive() {
		bundle = append(bundle, s.Msg().GetData()...)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("GetTaskData: %v", err)
	}
	sum := sha256.Sum256(bundle)
	if res := end.GetResult().GetDiagnostics(); res.GetSha256() != hex.EncodeToString(sum[:]) || res.GetSizeBytes() != int64(len(bundle)) {
		t.Errorf("the director's bundle: %d bytes, sha256 %x; the agent's result %v", len(bundle), sum, res)
	}
}

// takeN takes what the outbox gets until it has n messages (or 5 s
// passed), then waits 50 ms more for any extra one.
func takeN(o *outbox, n int) []*directorv1.SessionRequest {
	var got []*directorv1.SessionRequest
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		got = append(got, o.take()...)
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	return append(got, o.take()...)
}

// A Resync is answered with a full inventory carrying its id; the VM
// changes after it (here a create-vm task's) follow as deltas, the
// generation going on from the inventory's.
func TestSessionResyncAndDeltas(t *testing.T) {
	t.Parallel()
	f := startFakeSessions(t)
	h := taskAgent(t, f)
	requireKind(t, f, KindCreateVM)
	f.push(t, &directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Resync{Resync: &directorv1.Resync{ResyncId: "r-1", Reason: "register"}}})
	var inv *directorv1.Inventory
	f.wait(t, "an inventory for resync r-1", func() bool {
		for _, i := range f.invs {
			if i.GetResyncId() == "r-1" {
				inv = i
				return true
			}
		}
		return false
	})
	if inv.GetEpoch() == "" || len(inv.GetVms()) != 0 {
		t.Errorf("inventory %v; want an epoch and no VMs", inv)
	}
	kernel := filepath.Join(h.Layout.ImagesDir(), "vmlinuz")
	if err := os.MkdirAll(h.Layout.ImagesDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kernel, []byte("kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := newID()
	f.sendTask(t, &directorv1.Task{Id: id, DeadlineInMs: 60000, Kind: &directorv1.Task_CreateVm{CreateVm: &directorv1.CreateVM{
		Manifest: []byte("apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata:\n  name: db\nspec:\n  cpus: 1\n  memoryMiB: 64\n  boot:\n    kernel: " + kernel + "\n")}}})
	if st := f.waitTerminal(t, id); st.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED {
		t.Fatalf("create-vm: %v", st)
	}
	f.wait(t, "a delta with db", func() bool {
		for _, d := range f.deltas {
			for _, v := range d.GetUpserts() {
				if v.GetName() == "db" {
					return true
				}
			}
		}
		return false
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.deltas[0]; d.GetEpoch() != inv.GetEpoch() || d.GetGeneration() != inv.GetGeneration()+1 {
		t.Errorf("first delta epoch %s generation %d; want %s and %d", d.GetEpoch(), d.GetGeneration(), inv.GetEpoch(), inv.GetGeneration()+1)
	}
}
