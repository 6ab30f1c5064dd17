package loadgen_test

import (
	"context"
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
