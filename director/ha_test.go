package director_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/director/etcdstore"
	"github.com/virtcon/virtcon/enroll"
)

// replicaPair is two directors on one etcd prefix (one CA: the second
// uses the first's key file) and one clock (the first's).
func replicaPair(t *testing.T, opts ...func(*director.Options)) (a, b *directortest.Harness) {
	t.Helper()
	a = directortest.Start(t, opts...)
	b = directortest.Start(t, append(opts, func(o *director.Options) {
		o.Etcd.Prefix = a.Options.Etcd.Prefix
		o.KEKFile = filepath.Join(a.DataDir, director.KEKFileName)
		o.Now = a.Clock.Now
	})...)
	if a.Pin != b.Pin {
		t.Fatalf("replica pin %s, want the first director's %s (one CA)", b.Pin, a.Pin)
	}
	return a, b
}

// haSession is an agent's session on one replica with its incoming
// messages in a channel (closed when the stream ends).
type haSession struct {
	*session
	reg *directorv1.Registered
	in  chan *directorv1.SessionResponse
	err chan error // the stream's end
}

// haConnect opens node's session on h with cert, advertising kinds.
func haConnect(t *testing.T, h *directortest.Harness, cert *directortest.Enrolled, kinds ...string) *haSession {
	t.Helper()
	agent, hc := h.AgentClient(cert.Cert)
	t.Cleanup(hc.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &session{t: t, stream: agent.Session(ctx), cancel: cancel}
	if err := s.stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Register{Register: &directorv1.Register{
		NodeId: cert.NodeID, Host: &directorv1.HostFacts{Hostname: "host-ha", AgentVersion: "test"}, TaskKinds: kinds,
	}}}); err != nil {
		t.Fatalf("send Register: %v", err)
	}
	m, err := s.stream.Receive()
	if err != nil || m.GetRegistered() == nil {
		t.Fatalf("first answer %v (%v), want Registered", m, err)
	}
	hs := &haSession{session: s, reg: m.GetRegistered(), in: make(chan *directorv1.SessionResponse, 100), err: make(chan error, 1)}
	go func() {
		defer close(hs.in)
		for {
			m, err := s.stream.Receive()
			if err != nil {
				hs.err <- err
				return
			}
			hs.in <- m
		}
	}()
	return hs
}

// next is the next message that is not a Resync or HeartbeatAck.
func (s *haSession) next(t *testing.T, within time.Duration) *directorv1.SessionResponse {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case m, ok := <-s.in:
			if !ok {
				t.Fatal("the session ended")
			}
			if m.GetResync() != nil || m.GetHeartbeatAck() != nil {
				continue
			}
			return m
		case <-timeout:
			t.Fatalf("no message from the director within %s", within)
		}
	}
}

func enrolled(t *testing.T, h *directortest.Harness) *directortest.Enrolled {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, err := enroll.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	e, err := h.EnrollWith(ctx, h.Token(t, nil), key, "host-ha")
	if err != nil {
		t.Fatalf("enroll: %v", err)
	}
	return e
}

// sessionKey is sessions/<node> as the store has it (nil when absent)
// with the lease it is on.
func sessionKey(t *testing.T, h *directortest.Harness, node string) (map[string]any, clientv3.LeaseID) {
	t.Helper()
	s := h.Store(t)
	defer s.Close()
	resp, err := s.Client().Get(context.Background(), s.Prefix()+"sessions/"+node)
	if err != nil {
		t.Fatalf("get sessions/%s: %v", node, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0
	}
	var v map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &v); err != nil {
		t.Fatal(err)
	}
	return v, clientv3.LeaseID(resp.Kvs[0].Lease)
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFree waits until node's session key is gone and every replica
// shows it unconnected: each has then taken in when it was last heard,
// and a clock advanced after it counts from then. (Advanced before a
// replica's watch delivered the key's deletion, that replica took the
// hand-off as of the advanced time and judged the node Ready for another
// OfflineAfter: the test failed once in CI.)
func waitFree(t *testing.T, node string, hs ...*directortest.Harness) {
	t.Helper()
	waitFor(t, "sessions key gone", 5*time.Second, func() bool { v, _ := sessionKey(t, hs[0], node); return v == nil })
	for _, h := range hs {
		waitFor(t, "node free on "+h.D.ReplicaID(), 5*time.Second, func() bool { return !h.Node(t, node).GetNode().GetConnected() })
	}
}

// A node whose session another replica holds is never judged here:
// past OfflineAfter with the holder hearing it, it stays Ready on both
// and nothing writes it Offline. Once nobody holds it, the leader
// judges it. (Before, every replica swept every node: the one without
// the session wrote it Offline.)
func TestHAHeldElsewhereStaysReady(t *testing.T) {
	a, b := replicaPair(t, fastSweep)
	e := enrolled(t, a)
	s := haConnect(t, a, e)
	waitFor(t, "B sees the node held by A", 5*time.Second, func() bool {
		ni := b.Node(t, e.NodeID).GetNode()
		return ni.GetConnected() && ni.GetReplicaId() == a.D.ReplicaID()
	})
	st := a.Store(t)
	defer st.Close()
	nodeState := func() string {
		var rec struct {
			State string `json:"state"`
		}
		if _, err := st.Get(context.Background(), "nodestate/"+e.NodeID, &rec); err != nil {
			return ""
		}
		return rec.State
	}
	for i := uint64(1); i <= 6; i++ { // 120 s, heard every 20 s
		a.Clock.Advance(20 * time.Second)
		if err := s.heartbeat(i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // sweeps on both
		if got := nodeState(); got == director.StateOffline || got == director.StateDegraded {
			t.Fatalf("after %d s: nodestate %s, want Ready (held by A and heard)", i*20, got)
		}
	}
	for _, h := range []*directortest.Harness{a, b} {
		if got := h.Node(t, e.NodeID).GetNode().GetState(); got != director.StateReady {
			t.Errorf("replica %s: node %s, want Ready", h.D.ReplicaID(), got)
		}
	}
	// Silent on A: A judges it Degraded, and B shows what A wrote.
	a.Clock.Advance(director.DefaultDegradedAfter + time.Second)
	waitFor(t, "B shows the node Degraded as A judged it", 5*time.Second, func() bool {
		ni := b.Node(t, e.NodeID).GetNode()
		return ni.GetState() == director.StateDegraded && ni.GetConnected()
	})
	if err := s.heartbeat(100); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B shows it Ready again", 5*time.Second, func() bool { return b.Node(t, e.NodeID).GetNode().GetState() == director.StateReady })

	// Free: whoever leads judges it.
	s.stream.CloseRequest()
	s.cancel()
	waitFree(t, e.NodeID, a, b)
	a.Clock.Advance(director.DefaultOfflineAfter + time.Second)
	waitFor(t, "the free node written Offline", 5*time.Second, func() bool { return nodeState() == director.StateOffline })

	// Back on either replica: Ready in the store and on both, whichever
	// one wrote it Offline.
	for _, h := range []*directortest.Harness{a, b} {
		s := haConnect(t, h, e)
		waitFor(t, "Ready again on "+h.D.ReplicaID(), 5*time.Second, func() bool {
			return nodeState() == director.StateReady && a.Node(t, e.NodeID).GetNode().GetState() == director.StateReady &&
				b.Node(t, e.NodeID).GetNode().GetState() == director.StateReady
		})
		s.stream.CloseRequest()
		s.cancel()
		waitFree(t, e.NodeID, a, b)
		a.Clock.Advance(director.DefaultOfflineAfter + time.Second)
		waitFor(t, "Offline again", 5*time.Second, func() bool { return nodeState() == director.StateOffline })
	}
}

// A node that registers on B while A holds its session moves: B's key
// replaces A's, A's stream ends ("moved to replica B") and A does not
// delete B's key when its session closes.
func TestHASessionMoves(t *testing.T) {
	a, b := replicaPair(t)
	e := enrolled(t, a)
	sa := haConnect(t, a, e)
	if v, _ := sessionKey(t, a, e.NodeID); v["replica"] != a.D.ReplicaID() {
		t.Fatalf("sessions/%s = %v, want replica %s", e.NodeID, v, a.D.ReplicaID())
	}
	sb := haConnect(t, b, e)
	select {
	case <-sa.err:
	case <-time.After(3 * time.Second):
		t.Fatal("A's stream still open 3 s after the node registered on B")
	}
	waitFor(t, "A holds no session", 3*time.Second, func() bool { return a.D.Stats().Sessions == 0 })
	found := false
	for _, ev := range a.Audit(t) {
		if ev.GetKind() == "session.close" && ev.GetNodeId() == e.NodeID && strings.Contains(ev.GetDetail(), "moved to replica "+b.D.ReplicaID()) {
			found = true
		}
	}
	if !found {
		t.Errorf("no session.close 'moved to replica %s' in A's audit", b.D.ReplicaID())
	}
	time.Sleep(300 * time.Millisecond) // A's close is done
	if v, _ := sessionKey(t, a, e.NodeID); v["replica"] != b.D.ReplicaID() {
		t.Fatalf("sessions/%s = %v after the move, want replica %s", e.NodeID, v, b.D.ReplicaID())
	}
	if err := sb.heartbeat(1); err != nil {
		t.Fatalf("B's session: %v", err)
	}
	if ni := a.Node(t, e.NodeID).GetNode(); !ni.GetConnected() || ni.GetReplicaId() != b.D.ReplicaID() {
		t.Errorf("A shows the node connected %v via %q, want via %s", ni.GetConnected(), ni.GetReplicaId(), b.D.ReplicaID())
	}
}

// heartbeat sends a Heartbeat and waits for its ack (other messages
// skipped): the stream is read by haConnect's goroutine.
func (s *haSession) heartbeat(seq uint64) error {
	if err := s.stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Heartbeat{Heartbeat: &directorv1.Heartbeat{Seq: seq}}}); err != nil {
		return err
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-s.in:
			if !ok {
				return errors.New("the session ended")
			}
			if a := m.GetHeartbeatAck(); a != nil {
				if a.GetSeq() != seq {
					return fmt.Errorf("ack %d, want %d", a.GetSeq(), seq)
				}
				return nil
			}
		case <-timeout:
			return errors.New("no HeartbeatAck within 5 s")
		}
	}
}

// Both replicas list each other (one leader, their sessions); agents are
// told both addresses, this replica's first; a replica that stops says
// Goodbye with no delay (another is there), its keys vanish at once and
// the other pushes its new address list and takes the leadership.
func TestHAReplicaList(t *testing.T) {
	a, b := replicaPair(t)
	e := enrolled(t, a)
	if got := e.Resp.GetDirectors(); len(got) != 2 || got[0] != a.D.Advertise() {
		t.Errorf("EnrollResponse.directors %v, want [%s, %s]", got, a.D.Advertise(), b.D.Advertise())
	}
	sb := haConnect(t, b, e)
	if got := sb.reg.GetDirectors(); len(got) != 2 || got[0] != b.D.Advertise() || got[1] != a.D.Advertise() {
		t.Errorf("Registered.directors %v, want [%s %s]", got, b.D.Advertise(), a.D.Advertise())
	}
	e2 := enrolled(t, a)
	sa := haConnect(t, a, e2)
	list := func(h *directortest.Harness) []*directorv1.ReplicaInfo {
		resp, err := h.Admin.ListReplicas(context.Background(), connect.NewRequest(&directorv1.ListReplicasRequest{}))
		if err != nil {
			t.Fatalf("ListReplicas: %v", err)
		}
		return resp.Msg.GetReplicas()
	}
	waitFor(t, "both replicas listed with their sessions", 5*time.Second, func() bool {
		r := list(a)
		return len(r) == 2 && r[0].GetId() == a.D.ReplicaID() && r[1].GetId() == b.D.ReplicaID() &&
			r[0].GetSessions() == 1 && r[1].GetSessions() == 1 && r[0].GetLeader() != r[1].GetLeader() &&
			r[1].GetAdvertise() == b.D.Advertise()
	})

	b.Stop(t)
	var bye *directorv1.Goodbye
	for m := range sb.in { // until the stream's end
		if g := m.GetGoodbye(); g != nil {
			bye = g
		}
	}
	if bye == nil || bye.GetReconnectAfterMs() != 0 {
		t.Errorf("B at shutdown said %v, want Goodbye with no reconnect delay (A is live)", bye)
	}
	if v, _ := sessionKey(t, a, e.NodeID); v != nil {
		t.Errorf("sessions/%s = %v after B stopped, want gone with its lease", e.NodeID, v)
	}
	m := sa.next(t, 10*time.Second)
	if got := m.GetDirectors().GetAddrs(); len(got) != 1 || got[0] != a.D.Advertise() {
		t.Errorf("A pushed %v, want Directors{[%s]}", m, a.D.Advertise())
	}
	waitFor(t, "A alone and leading", 10*time.Second, func() bool {
		r := list(a)
		return len(r) == 1 && r[0].GetLeader()
	})
}

// A task created through B's admin socket reaches the node whose session
// A holds (the tasks/ watch), and its status written by A shows on B.
func TestHATaskThroughOtherReplica(t *testing.T) {
	a, b := replicaPair(t)
	e := enrolled(t, a)
	s := haConnect(t, a, e, allKinds...)
	task := startTask("web")
	createTask(t, b, e.NodeID, task)
	m := s.next(t, 5*time.Second)
	if m.GetTask().GetId() != task.GetId() {
		t.Fatalf("A's session got %v, want task %s", m, task.GetId())
	}
	if err := s.stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskStatus{TaskStatus: &directorv1.TaskStatus{
		TaskId: task.GetId(), Seq: 1, Phase: queued}}}); err != nil {
		t.Fatal(err)
	}
	ti := waitPhase(t, b, task.GetId(), queued)
	if ti.GetReplicaId() != a.D.ReplicaID() {
		t.Errorf("task's replica %q, want the holder %s", ti.GetReplicaId(), a.D.ReplicaID())
	}
}

// A replica whose lease etcd lost (revoked behind its back here) takes a
// new one and puts replicas/<id> and its sessions' keys on it again;
// the sessions' streams are not cut.
func TestHALeaseLostRegranted(t *testing.T) {
	a := directortest.Start(t)
	var nodes []string
	var sessions []*haSession
	for range 3 { // more than one: the keys go back in one transaction
		e := enrolled(t, a)
		nodes = append(nodes, e.NodeID)
		sessions = append(sessions, haConnect(t, a, e))
	}
	_, old := sessionKey(t, a, nodes[0])
	if old == 0 {
		t.Fatal("no sessions key")
	}
	st := a.Store(t)
	defer st.Close()
	if _, err := st.Client().Revoke(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		waitFor(t, "sessions key back on a new lease", 15*time.Second, func() bool {
			v, l := sessionKey(t, a, n)
			return v != nil && l != old && l != 0
		})
	}
	resp, err := st.Client().Get(context.Background(), st.Prefix()+"replicas/"+a.D.ReplicaID())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == int64(old) {
		t.Fatalf("replicas/%s after the loss: %v %v, want it on the new lease", a.D.ReplicaID(), resp, err)
	}
	for i, s := range sessions {
		if err := s.heartbeat(7); err != nil {
			t.Fatalf("session %d after the lease loss: %v", i, err)
		}
	}
}

// A liveness transition whose write fails (etcd away) is written once
// etcd is back: the tracker has moved on, so before, it was lost for good
// and the store said Ready for a node long Offline.
func TestHALivenessWriteRetried(t *testing.T) {
	dir := t.TempDir()
	member, err := etcdstore.Open(t.Context(), etcdstore.Options{DataDir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { member.Close() }) // after the director's Stop
	h := directortest.Start(t, fastSweep, func(o *director.Options) {
		o.Etcd.Endpoints = []string{member.Endpoint()}
		o.Etcd.RequestTimeout = 500 * time.Millisecond
	})
	e := enrolled(t, h) // no session: a free node, the leader's to judge
	waitFor(t, "leading", 5*time.Second, func() bool {
		resp, err := h.Admin.ListReplicas(context.Background(), connect.NewRequest(&directorv1.ListReplicasRequest{}))
		return err == nil && len(resp.Msg.GetReplicas()) == 1 && resp.Msg.GetReplicas()[0].GetLeader()
	})
	if err := member.Close(); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(director.DefaultOfflineAfter + time.Second)
	time.Sleep(1500 * time.Millisecond) // sweeps whose write fails
	if member, err = etcdstore.Open(t.Context(), etcdstore.Options{DataDir: dir, UnsafeNoFsync: true}); err != nil {
		t.Fatal(err)
	}
	st := h.Store(t)
	defer st.Close()
	waitFor(t, "nodestate Offline written after etcd came back", 20*time.Second, func() bool {
		var rec struct {
			State string `json:"state"`
		}
		_, err := st.Get(context.Background(), "nodestate/"+e.NodeID, &rec)
		return err == nil && rec.State == director.StateOffline
	})
}

// A join token that expires unused is audited (token.expire) by the
// leader's sweep, once, without anyone listing or using it.
func TestHATokenExpiryAudited(t *testing.T) {
	old := *director.TokenSweepEvery
	*director.TokenSweepEvery = 20 * time.Millisecond
	t.Cleanup(func() { *director.TokenSweepEvery = old })
	a, _ := replicaPair(t)
	if _, err := a.Admin.CreateToken(context.Background(), connect.NewRequest(&directorv1.CreateTokenRequest{TtlMs: 60_000})); err != nil {
		t.Fatal(err)
	}
	a.Clock.Advance(2 * time.Minute)
	st := a.Store(t)
	defer st.Close()
	count := func() int {
		n := 0
		if err := st.List(context.Background(), "audit/", func(_ string, _ int64, raw []byte) error {
			if strings.Contains(string(raw), `"token.expire"`) {
				n++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, "token.expire audited", 5*time.Second, func() bool { return count() >= 1 })
	time.Sleep(200 * time.Millisecond) // more sweeps, on both replicas' leader only
	if n := count(); n != 1 {
		t.Errorf("%d token.expire entries, want 1", n)
	}
}

// A node whose session another replica closed is Offline after
// OfflineAfter of silence counted from the close, on the leader that
// judges it now; one whose replica died, a lease TTL sooner.
func TestHAFreeNodeLastSeen(t *testing.T) {
	a, b := replicaPair(t, fastSweep)
	resp, err := a.Admin.ListReplicas(context.Background(), connect.NewRequest(&directorv1.ListReplicasRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	leader, holder := a, b
	for _, r := range resp.Msg.GetReplicas() {
		if r.GetLeader() && r.GetId() == b.D.ReplicaID() {
			leader, holder = b, a
		}
	}
	e := enrolled(t, a)
	s := haConnect(t, holder, e)
	waitFor(t, "the leader sees the node held", 5*time.Second, func() bool {
		return leader.Node(t, e.NodeID).GetNode().GetReplicaId() == holder.D.ReplicaID()
	})
	a.Clock.Advance(20 * time.Second) // held a while: the close is later than the claim
	if err := s.heartbeat(1); err != nil {
		t.Fatal(err)
	}
	s.stream.CloseRequest()
	s.cancel()
	waitFree(t, e.NodeID, a, b)
	a.Clock.Advance(director.DefaultOfflineAfter - 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	if got := leader.Node(t, e.NodeID).GetNode().GetState(); got == director.StateOffline {
		t.Fatalf("on the leader %s after the close: %s, want not Offline yet", (director.DefaultOfflineAfter - 5*time.Second), got)
	}
	a.Clock.Advance(6 * time.Second)
	waitFor(t, "Offline after OfflineAfter", 5*time.Second, func() bool {
		return leader.Node(t, e.NodeID).GetNode().GetState() == director.StateOffline
	})
}
