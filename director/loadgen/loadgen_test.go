package loadgen_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/director/loadgen"
	"github.com/virtcon/virtcon/enroll"
)

func TestMain(m *testing.M) { directortest.Main(m) }

// A small run of the load generator against a real director keeps it
// from rotting between benchmarks: 50 agents enrol 8 at a time, each
// holds its own mTLS session, every one registers, heartbeats are
// answered, and the director lists them all Ready.
func TestSmoke(t *testing.T) {
	const n = 50
	h := directortest.Start(t)
	joins := make([]enroll.Join, n)
	for i := range joins {
		joins[i] = h.Token(t, &directorv1.CreateTokenRequest{MaxUses: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids, err := loadgen.Enrol(ctx, joins, 8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id.NodeID == "" || seen[id.NodeID] {
			t.Fatalf("node id %q empty or repeated", id.NodeID)
		}
		seen[id.NodeID] = true
	}
	// enrolling again with a used token is refused
	if _, err := loadgen.Enrol(ctx, joins[:1], 1); err == nil {
		t.Fatal("a used token enrolled a second agent")
	}

	var st loadgen.Stats
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { loadgen.Sessions(sctx, h.Addr, "127.0.0.1", ids, 200*time.Millisecond, &st); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for (st.Registered.Load() < n || st.Acks.Load() < 2*n) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	<-done
	if r, a := st.Registered.Load(), st.Acks.Load(); r < n || a < 2*n {
		t.Fatalf("registered %d of %d, %d heartbeats answered (want >= %d)", r, n, a, 2*n)
	}
	if e := st.Errors.Load(); e != 0 {
		t.Errorf("%d session errors", e)
	}
	nodes, err := h.Admin.ListNodes(ctx, connect.NewRequest(&directorv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, nd := range nodes.Msg.Nodes {
		if nd.State == "Ready" {
			ready++
		}
	}
	if ready != n {
		t.Errorf("%d of %d nodes Ready", ready, n)
	}
}

// Tasks through the load generator: 50 agents that run tasks, 100 tasks
// 4 in flight, each seen Queued through WatchTask and run once; every
// session answered its Resync with the synthetic inventory, which
// ListVMs counts.
func TestSmokeDispatch(t *testing.T) {
	const n, vms = 50, 3
	h := directortest.Start(t)
	joins := make([]enroll.Join, n)
	for i := range joins {
		joins[i] = h.Token(t, &directorv1.CreateTokenRequest{MaxUses: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids, err := loadgen.Enrol(ctx, joins, 8)
	if err != nil {
		t.Fatal(err)
	}
	var st loadgen.Stats
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		loadgen.SessionsWith(sctx, h.Addr, "127.0.0.1", ids, loadgen.Options{Period: time.Second, TaskKinds: []string{"start-vm"}, VMs: vms}, &st)
		close(done)
	}()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for st.Registered.Load() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var nodes []string
	for _, id := range ids {
		nodes = append(nodes, id.NodeID)
	}
	res, err := loadgen.Dispatch(ctx, h.Admin, nodes, 100, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Latency <= 0 || r.DispatchUs <= 0 {
			t.Errorf("task %d: latency %s, dispatch_us %d: want both > 0", i, r.Latency, r.DispatchUs)
		}
	}
	if got, dup := st.Tasks.Load(), st.Duplicates.Load(); got != 100 || dup != 0 {
		t.Errorf("agents ran %d tasks (%d delivered again), want 100 once each", got, dup)
	}
	for time.Now().Before(deadline) {
		resp, err := h.Admin.ListVMs(ctx, connect.NewRequest(&directorv1.ListVMsRequest{CountOnly: true}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Msg.GetCount() == n*vms {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("ListVMs count did not reach %d", n*vms)
}

// Addrs rotation: with the first address dead (nothing listens), the
// agents that start there move on to the next one, as the agent rotates
// through its directors, and OnRegistered names each agent once it is on.
func TestSmokeAddrsRotation(t *testing.T) {
	const n = 10
	h := directortest.Start(t)
	joins := make([]enroll.Join, n)
	for i := range joins {
		joins[i] = h.Token(t, &directorv1.CreateTokenRequest{MaxUses: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids, err := loadgen.Enrol(ctx, joins, 4)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	var mu sync.Mutex
	on := map[int]bool{}
	var st loadgen.Stats
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		loadgen.SessionsWith(sctx, "", "127.0.0.1", ids, loadgen.Options{Period: time.Second, Addrs: []string{dead, h.Addr},
			OnRegistered: func(i int, _ string) { mu.Lock(); on[i] = true; mu.Unlock() }}, &st)
		close(done)
	}()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got := len(on)
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d agents registered through the rotation", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e := st.Errors.Load(); e < n/2 {
		t.Errorf("%d failed sessions, want at least %d (the agents that began on the dead address)", e, n/2)
	}
}
