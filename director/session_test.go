package director_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"net/http/httptrace"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/enroll"
)

// session is an agent's Session stream in a test.
type session struct {
	t      testing.TB
	stream *connect.BidiStreamForClient[directorv1.SessionRequest, directorv1.SessionResponse]
	cancel context.CancelFunc
}

// openSession opens a Session with cert and registers as node.
func openSession(t testing.TB, agent directorv1connect.AgentServiceClient, node string) (*session, *directorv1.Registered) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &session{t: t, stream: agent.Session(ctx), cancel: cancel}
	if err := s.stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Register{Register: &directorv1.Register{
		NodeId: node,
		Host:   &directorv1.HostFacts{Hostname: "host-a", AgentVersion: "test"},
	}}}); err != nil {
		t.Fatalf("send Register: %v", err)
	}
	m, err := s.stream.Receive()
	if err != nil {
		t.Fatalf("receive Registered: %v", err)
	}
	reg := m.GetRegistered()
	if reg == nil {
		t.Fatalf("first answer %v, want Registered", m)
	}
	// Every session starts with a request for the full inventory.
	if m, err = s.stream.Receive(); err != nil {
		t.Fatalf("receive Resync: %v", err)
	}
	if r := m.GetResync(); r == nil || r.GetReason() != director.ResyncRegister || r.GetResyncId() == "" {
		t.Fatalf("answer after Registered %v, want Resync{reason: register}", m)
	}
	return s, reg
}

func (s *session) heartbeat(seq uint64) error {
	if err := s.stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Heartbeat{Heartbeat: &directorv1.Heartbeat{Seq: seq}}}); err != nil {
		return err
	}
	m, err := s.stream.Receive()
	if err != nil {
		return err
	}
	if m.GetHeartbeatAck().GetSeq() != seq {
		return errors.New("want HeartbeatAck " + m.String())
	}
	return nil
}

func (s *session) report(vms ...*directorv1.VMSummary) {
	s.t.Helper()
	if err := s.stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_HostReport{HostReport: &directorv1.HostReport{
		Vms: vms, Acceleration: "tcg",
	}}}); err != nil {
		s.t.Fatalf("send HostReport: %v", err)
	}
}

func TestSessionRegisterHeartbeat(t *testing.T) {
	h := directortest.Start(t)
	node, cert := h.Enroll(t, nil)
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	s, reg := openSession(t, agent, node)
	if reg.GetNodeId() != node || reg.GetHeartbeatIntervalMs() != 10000 || reg.GetReportIntervalMs() != 60000 {
		t.Errorf("Registered = %v, want node %s, 10000 ms, 60000 ms", reg, node)
	}
	for i := uint64(1); i <= 3; i++ {
		if err := s.heartbeat(i); err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	if got := h.D.Stats().Sessions; got != 1 {
		t.Errorf("Stats().Sessions = %d, want 1", got)
	}
	n := h.Node(t, node)
	if n.GetNode().GetState() != director.StateReady || !n.GetNode().GetConnected() {
		t.Errorf("node state %s connected %v, want Ready, connected", n.GetNode().GetState(), n.GetNode().GetConnected())
	}
}

// reuseTrace records whether each request reused a connection.
type reuseTrace struct {
	mu     sync.Mutex
	reused []bool
}

func (r *reuseTrace) ctx(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		r.mu.Lock()
		r.reused = append(r.reused, i.Reused)
		r.mu.Unlock()
	}})
}

func (r *reuseTrace) last() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reused) > 0 && r.reused[len(r.reused)-1]
}

// renewReq is a RenewCertificate request for a fresh key: a cheap call
// that needs the node's certificate.
func renewReq(t testing.TB) (*ecdsa.PrivateKey, *connect.Request[directorv1.RenewCertificateRequest]) {
	t.Helper()
	key := newKey(t)
	csr, err := enroll.NewCSR(key, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	return key, connect.NewRequest(&directorv1.RenewCertificateRequest{CsrDer: csr})
}

// Revoking a node fails its next call on the very same HTTP/2 connection
// and ends its live Session stream within a second.
func TestRevokeSameConnectionAndStream(t *testing.T) {
	h := directortest.Start(t)
	node, cert := h.Enroll(t, nil)
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	s, _ := openSession(t, agent, node)
	if err := s.heartbeat(1); err != nil {
		t.Fatal(err)
	}
	var trace reuseTrace
	_, req := renewReq(t)
	if _, err := agent.RenewCertificate(trace.ctx(context.Background()), req); err != nil {
		t.Fatalf("call before revocation: %v", err)
	}
	if !trace.last() {
		t.Fatalf("the call before revocation did not reuse the session's connection")
	}

	ended := make(chan error, 1)
	go func() {
		for {
			m, err := s.stream.Receive()
			if err != nil {
				ended <- err
				return
			}
			if m.GetRevoked() == nil {
				ended <- errors.New("got " + m.String() + ", want Revoked")
				return
			}
		}
	}()
	if _, err := h.Admin.RevokeNode(context.Background(), connect.NewRequest(&directorv1.RevokeNodeRequest{Id: node, Reason: "test"})); err != nil {
		t.Fatal(err)
	}
	revokedAt := time.Now()
	select {
	case err := <-ended:
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("stream ended with %v, want Unauthenticated", err)
		}
		if d := time.Since(revokedAt); d > time.Second {
			t.Errorf("stream ended %s after the revocation, want within 1 s", d)
		}
	case <-time.After(time.Second):
		t.Fatalf("the session stream was still open 1 s after the revocation")
	}

	// Leave: its handler would answer a revoked node (leaving twice is
	// fine), so only the per-request check can refuse it.
	_, err := agent.Leave(trace.ctx(context.Background()), connect.NewRequest(&directorv1.LeaveRequest{}))
	wantCode(t, err, connect.CodeUnauthenticated)
	if !trace.last() {
		t.Errorf("the refused call did not reuse the connection: the test proves nothing about per-request checks")
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "certificate revoked" {
		t.Errorf("message %q, want %q", ce.Message(), "certificate revoked")
	}
	if st := h.Node(t, node).GetNode(); st.GetState() != director.StateRevoked || st.GetRevokeReason() != "test" {
		t.Errorf("node state %s reason %q, want Revoked, test (the admin's reason)", st.GetState(), st.GetRevokeReason())
	}
	kinds := h.AuditKinds(t)
	if kinds["node.revoke"] != 1 || kinds["cert.revoke"] != 2 {
		t.Errorf("audit kinds %v, want one node.revoke and two cert.revoke (enrolled, renewed)", kinds)
	}
}

// A certificate that expires while its connection is open is refused on
// the next request (the director's clock, per request), and its live
// session is ended by the sweep.
func TestExpiredCertificatePerRequest(t *testing.T) {
	h := directortest.Start(t, func(o *director.Options) { o.SweepEvery = 20 * time.Millisecond })
	node, cert := h.Enroll(t, nil)
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	s, _ := openSession(t, agent, node)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := s.stream.Receive(); err != nil {
				ended <- err
				return
			}
		}
	}()
	var trace reuseTrace
	_, req := renewReq(t)
	if _, err := agent.RenewCertificate(trace.ctx(context.Background()), req); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(cert.Leaf.NotAfter.Sub(h.Clock.Now()) + time.Second)
	_, req = renewReq(t)
	_, err := agent.RenewCertificate(trace.ctx(context.Background()), req)
	wantCode(t, err, connect.CodeUnauthenticated)
	if !trace.last() {
		t.Errorf("the refused call did not reuse the connection")
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "certificate expired" {
		t.Errorf("message %q, want %q", ce.Message(), "certificate expired")
	}
	select {
	case err := <-ended:
		wantCode(t, err, connect.CodeUnauthenticated)
	case <-time.After(time.Second):
		t.Errorf("the session of an expired certificate was open 1 s later")
	}
	// A new connection fails at the handshake already.
	agent2, hc2 := h.AgentClient(cert)
	defer hc2.CloseIdleConnections()
	_, req = renewReq(t)
	if _, err := agent2.RenewCertificate(context.Background(), req); err == nil {
		t.Errorf("a new connection with the expired certificate worked")
	}
}

// A register that names another node than the certificate's is refused.
func TestSessionRegisterWrongNode(t *testing.T) {
	h := directortest.Start(t)
	_, cert := h.Enroll(t, nil)
	other, _ := h.Enroll(t, nil)
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	stream := agent.Session(context.Background())
	if err := stream.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Register{Register: &directorv1.Register{NodeId: other}}}); err != nil {
		t.Fatal(err)
	}
	_, err := stream.Receive()
	wantCode(t, err, connect.CodePermissionDenied)

	// Without a client certificate nothing but Enroll answers.
	noCert := directorv1connect.NewAgentServiceClient(h.HTTPClient(nil), h.URL())
	_, req := renewReq(t)
	_, err = noCert.RenewCertificate(context.Background(), req)
	wantCode(t, err, connect.CodeUnauthenticated)
}

// Renewal: the new certificate works at once; the old one keeps working
// until a session registers with the new one, then it is superseded.
func TestRenewSupersedes(t *testing.T) {
	h := directortest.Start(t)
	node, oldCert := h.Enroll(t, nil)
	agent, hc := h.AgentClient(oldCert)
	defer hc.CloseIdleConnections()
	h.Clock.Advance(24 * 24 * time.Hour) // 80 % of 30 days
	lost := renewWith(t, agent, node)
	if got := lost.Leaf.NotAfter; !got.After(oldCert.Leaf.NotAfter) {
		t.Errorf("new NotAfter %s, want after the old %s", got, oldCert.Leaf.NotAfter)
	}
	// Both valid: the caller's and the new one.
	lostAgent, hc2 := h.AgentClient(lost)
	defer hc2.CloseIdleConnections()
	bad := func() *connect.Request[directorv1.RenewCertificateRequest] {
		return connect.NewRequest(&directorv1.RenewCertificateRequest{CsrDer: []byte("x")})
	}
	_, err := lostAgent.RenewCertificate(context.Background(), bad())
	wantCode(t, err, connect.CodeInvalidArgument)
	// The agent lost that answer and renews again with the old one: the
	// lost certificate is superseded at once, the old one stays valid.
	newest := renewWith(t, agent, node)
	var trace reuseTrace
	_, err = lostAgent.RenewCertificate(trace.ctx(context.Background()), bad())
	wantCode(t, err, connect.CodeUnauthenticated)
	if !trace.last() {
		t.Errorf("the superseded certificate's refused call did not reuse its connection")
	}
	_, err = agent.RenewCertificate(context.Background(), bad())
	wantCode(t, err, connect.CodeInvalidArgument)
	// A session on the newest certificate supersedes the old one.
	newestAgent, hc3 := h.AgentClient(newest)
	defer hc3.CloseIdleConnections()
	s, _ := openSession(t, newestAgent, node)
	if err := s.heartbeat(1); err != nil {
		t.Fatal(err)
	}
	// The node is not revoked, only the old serials: the per-request
	// check refuses them, on the connections they used before.
	_, err = agent.RenewCertificate(trace.ctx(context.Background()), bad())
	wantCode(t, err, connect.CodeUnauthenticated)
	if !trace.last() {
		t.Errorf("the old certificate's refused call did not reuse its connection")
	}
	if err := s.heartbeat(2); err != nil {
		t.Errorf("the session on the newest certificate after superseding: %v", err)
	}
	if got := h.Node(t, node).GetNode(); got.GetCertSerial() != newest.Leaf.SerialNumber.Text(16) || got.GetState() != director.StateReady {
		t.Errorf("node serial %s state %s, want %s Ready", got.GetCertSerial(), got.GetState(), newest.Leaf.SerialNumber.Text(16))
	}
	kinds := h.AuditKinds(t)
	if kinds["cert.renew"] != 2 || kinds["cert.revoke"] != 2 {
		t.Errorf("audit kinds %v, want 2 cert.renew and 2 cert.revoke (superseded)", kinds)
	}
}

// Leave revokes the node (reason left) and ends its session.
func TestLeave(t *testing.T) {
	h := directortest.Start(t)
	node, cert := h.Enroll(t, nil)
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	if _, err := agent.Leave(context.Background(), connect.NewRequest(&directorv1.LeaveRequest{Reason: "decommissioned"})); err != nil {
		t.Fatal(err)
	}
	_, req := renewReq(t)
	_, err := agent.RenewCertificate(context.Background(), req)
	wantCode(t, err, connect.CodeUnauthenticated)
	n := h.Node(t, node).GetNode()
	if n.GetState() != director.StateRevoked || n.GetRevokeReason() != "left" {
		t.Errorf("node %s %q, want Revoked left", n.GetState(), n.GetRevokeReason())
	}
	if h.AuditKinds(t)["node.leave"] != 1 {
		t.Errorf("no node.leave audit entry")
	}
}

// A director shutting down says Goodbye to its sessions and Serve
// returns.
func TestShutdownSaysGoodbye(t *testing.T) {
	h := directortest.Start(t)
	node, cert := h.Enroll(t, nil)
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	s, _ := openSession(t, agent, node)
	got := make(chan *directorv1.SessionResponse, 1)
	go func() {
		m, _ := s.stream.Receive()
		got <- m
	}()
	h.Stop(t)
	select {
	case m := <-got:
		if m.GetGoodbye() == nil || m.GetGoodbye().GetReconnectAfterMs() <= 0 {
			t.Errorf("at shutdown the agent got %v, want Goodbye with a reconnect delay", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Goodbye 5 s after the shutdown")
	}
}

// A revocation made by another director on the same etcd (a replica)
// reaches this one through its watch: the live stream is cut and the
// next call refused.
func TestRevocationFromAnotherReplica(t *testing.T) {
	a := directortest.Start(t)
	b := directortest.Start(t, func(o *director.Options) {
		o.Etcd.Prefix = a.Options.Etcd.Prefix
		o.KEKFile = a.Options.KEKFile
		if o.KEKFile == "" {
			o.KEKFile = filepath.Join(a.DataDir, director.KEKFileName)
		}
	})
	if a.Pin != b.Pin {
		t.Fatalf("replica pin %s, want the first director's %s (one CA)", b.Pin, a.Pin)
	}
	node, cert := a.Enroll(t, nil)
	agent, hc := a.AgentClient(cert)
	defer hc.CloseIdleConnections()
	s, _ := openSession(t, agent, node)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := s.stream.Receive(); err != nil {
				ended <- err
				return
			}
		}
	}()
	if _, err := b.Admin.RevokeNode(context.Background(), connect.NewRequest(&directorv1.RevokeNodeRequest{Id: node})); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		wantCode(t, err, connect.CodeUnauthenticated)
	case <-time.After(time.Second):
		t.Fatal("the stream on the other director was open 1 s after the revocation")
	}
	_, req := renewReq(t)
	_, err := agent.RenewCertificate(context.Background(), req)
	wantCode(t, err, connect.CodeUnauthenticated)
}
