package directortest

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/etcdstore"
	"github.com/virtcon/virtcon/enroll"
)

// Clock is a fake clock: it stands still at its start (time.Now() when
// made, monotonic reading kept) until Advance moves it.
type Clock struct {
	base time.Time
	off  atomic.Int64
}

// NewClock is a Clock at time.Now().
func NewClock() *Clock { return &Clock{base: time.Now()} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { return c.base.Add(time.Duration(c.off.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

var (
	etcdOnce  sync.Once
	etcdStore *etcdstore.Store
	etcdDir   string
	etcdErr   error
)

// sharedEtcd is the test binary's etcd client URL, the member started on
// first call.
func sharedEtcd() (string, error) {
	etcdOnce.Do(func() {
		etcdDir, etcdErr = os.MkdirTemp("", "vde")
		if etcdErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		etcdStore, etcdErr = etcdstore.Open(ctx, etcdstore.Options{
			DataDir: etcdDir, UnsafeNoFsync: true, Prefix: "/directortest/",
		})
	})
	if etcdErr != nil {
		return "", fmt.Errorf("directortest: shared etcd: %w", etcdErr)
	}
	return etcdStore.Endpoint(), nil
}

// Main runs the tests and then stops the shared etcd member and removes
// its files: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if etcdStore != nil {
		etcdStore.Close()
	}
	if etcdDir != "" {
		os.RemoveAll(etcdDir)
	}
	os.Exit(code)
}

// Harness is one running director.
type Harness struct {
	D       *director.Director
	Addr    string // the TLS listener, 127.0.0.1:<port>
	Pin     string // the root CA's pin
	DataDir string
	Clock   *Clock
	Admin   directorv1connect.AdminServiceClient
	// Options are those the director was opened with (Restart reuses them).
	Options director.Options

	t       testing.TB
	cancel  context.CancelFunc
	done    chan error
	mu      sync.Mutex
	clients []*http.Client
}

// Start opens and serves a director on 127.0.0.1:0 with its own data
// directory, etcd prefix and Clock; opts may change its Options. It stops
// at the test's end.
func Start(t testing.TB, opts ...func(*director.Options)) *Harness {
	t.Helper()
	ep, err := sharedEtcd()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "vd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var b [6]byte
	_, _ = rand.Read(b[:])
	clock := NewClock()
	o := director.Options{
		DataDir:   dir,
		Listen:    "127.0.0.1:0",
		Advertise: "127.0.0.1",
		Etcd: etcdstore.Options{Endpoints: []string{ep}, Prefix: "/t/" + hex.EncodeToString(b[:]) + "/",
			Logger: testLogger(t, slog.LevelWarn)},
		Now:    clock.Now,
		Logger: testLogger(t, slog.LevelDebug),
	}
	for _, f := range opts {
		f(&o)
	}
	h := &Harness{DataDir: dir, Clock: clock, Options: o, t: t}
	h.start(t)
	t.Cleanup(func() { h.Stop(t) })
	return h
}

func (h *Harness) start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := director.Open(ctx, h.Options)
	if err != nil {
		t.Fatalf("director.Open: %v", err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	h.D, h.Addr, h.Pin, h.cancel = d, d.Addr(), d.Pin(), scancel
	h.Admin = director.AdminClient(d.AdminSocket())
	h.done = make(chan error, 1)
	go func() { h.done <- d.Serve(sctx) }()
}

// Stop stops serving and closes the director (at most once; Restart
// opens it again).
func (h *Harness) Stop(t testing.TB) {
	t.Helper()
	if h.cancel == nil {
		return
	}
	// Idle client connections closed first: the server's graceful
	// shutdown would wait a second for each to go.
	h.mu.Lock()
	for _, c := range h.clients {
		c.CloseIdleConnections()
	}
	h.clients = nil
	h.mu.Unlock()
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("director.Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("director.Serve did not return 15 s after its context ended")
	}
	if err := h.D.Close(); err != nil {
		t.Errorf("director.Close: %v", err)
	}
}

// Restart stops the director and opens a new one on the same data
// directory, etcd prefix and Clock, on a new port unless Options.Listen
// names one.
func (h *Harness) Restart(t testing.TB) {
	t.Helper()
	h.Stop(t)
	h.start(t)
}

// Token creates a join token through the admin socket.
func (h *Harness) Token(t testing.TB, req *directorv1.CreateTokenRequest) enroll.Join {
	t.Helper()
	if req == nil {
		req = &directorv1.CreateTokenRequest{}
	}
	resp, err := h.Admin.CreateToken(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	j, err := enroll.ParseJoin(resp.Msg.GetJoinString())
	if err != nil {
		t.Fatalf("CreateToken's join string: %v", err)
	}
	return j
}

// ClientTLS is what an agent dials with: the director verified by the
// pin alone, TLS 1.3, with cert as the client certificate (none when
// nil).
func (h *Harness) ClientTLS(cert *tls.Certificate) *tls.Config {
	host, _, _ := net.SplitHostPort(h.Addr)
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // the pin is the check: VerifyConnection
		VerifyConnection:   enroll.VerifyPinned(h.Pin, host),
		NextProtos:         []string{"h2"},
	}
	if cert != nil {
		c := *cert
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	return cfg
}

// HTTPClient is an HTTP/2-only client with its own connection pool, as an
// agent has: cert is its client certificate (nil: none).
func (h *Harness) HTTPClient(cert *tls.Certificate) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   h.ClientTLS(cert),
		Protocols:         &p,
		ForceAttemptHTTP2: true,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 20 * time.Second, PingTimeout: 10 * time.Second},
	}}
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	return c
}

// URL is the director's base URL.
func (h *Harness) URL() string { return "https://" + h.Addr }

// EnrollClient is an EnrollService client without a client certificate.
func (h *Harness) EnrollClient() directorv1connect.EnrollServiceClient {
	return directorv1connect.NewEnrollServiceClient(h.HTTPClient(nil), h.URL())
}

// AgentClient is an AgentService client with cert, on its own
// connection pool (close it with CloseIdleConnections on the client).
func (h *Harness) AgentClient(cert tls.Certificate) (directorv1connect.AgentServiceClient, *http.Client) {
	hc := h.HTTPClient(&cert)
	return directorv1connect.NewAgentServiceClient(hc, h.URL()), hc
}

// Enrolled is an enrolment's result.
type Enrolled struct {
	NodeID string
	Cert   tls.Certificate // leaf + intermediate, the key, Leaf parsed
	Resp   *directorv1.EnrollResponse
}

// EnrollWith enrols key with join over real pinned TLS, as hostname.
func (h *Harness) EnrollWith(ctx context.Context, join enroll.Join, key *ecdsa.PrivateKey, hostname string) (*Enrolled, error) {
	csr, err := enroll.NewCSR(key, hostname)
	if err != nil {
		return nil, err
	}
	resp, err := h.EnrollClient().Enroll(ctx, connect.NewRequest(&directorv1.EnrollRequest{
		Token:  join.Token(),
		CsrDer: csr,
		Host:   &directorv1.HostFacts{Hostname: hostname, HostUuid: "00000000-0000-4000-8000-000000000001", AgentVersion: "test"},
		Capabilities: []*directorv1.Capability{
			{Name: "kvm", Available: false, Detail: "test"}, {Name: "tcg", Available: true},
		},
	}))
	if err != nil {
		return nil, err
	}
	return Identity(key, resp.Msg)
}

// Identity makes the client certificate of an enrolment's answer.
func Identity(key *ecdsa.PrivateKey, resp *directorv1.EnrollResponse) (*Enrolled, error) {
	leaf, err := x509.ParseCertificate(resp.GetCertDer())
	if err != nil {
		return nil, fmt.Errorf("enrolment answer: certificate: %w", err)
	}
	if len(resp.GetCaChainDer()) < 1 {
		return nil, errors.New("enrolment answer: no CA chain")
	}
	return &Enrolled{
		NodeID: resp.GetNodeId(),
		Cert:   tls.Certificate{Certificate: [][]byte{resp.GetCertDer(), resp.GetCaChainDer()[0]}, PrivateKey: key, Leaf: leaf},
		Resp:   resp,
	}, nil
}

// Enroll makes a one-use token and enrols key with it as a host named
// "node-<random>": the node id and its client certificate.
func (h *Harness) Enroll(t testing.TB, key *ecdsa.PrivateKey) (string, tls.Certificate) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return h.EnrollAs(t, key, "node-"+hex.EncodeToString(b[:]))
}

// EnrollAs is Enroll with a hostname.
func (h *Harness) EnrollAs(t testing.TB, key *ecdsa.PrivateKey, hostname string) (string, tls.Certificate) {
	t.Helper()
	if key == nil {
		var err error
		if key, err = enroll.NewKey(); err != nil {
			t.Fatal(err)
		}
	}
	j := h.Token(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := h.EnrollWith(ctx, j, key, hostname)
	if err != nil {
		t.Fatalf("enroll %s: %v", hostname, err)
	}
	return e.NodeID, e.Cert
}

// Node is the admin view of one node (by id or hostname).
func (h *Harness) Node(t testing.TB, id string) *directorv1.GetNodeResponse {
	t.Helper()
	resp, err := h.Admin.GetNode(context.Background(), connect.NewRequest(&directorv1.GetNodeRequest{Id: id}))
	if err != nil {
		t.Fatalf("GetNode %s: %v", id, err)
	}
	return resp.Msg
}

// WaitNodeState polls until node is in state, failing after timeout.
func (h *Harness) WaitNodeState(t testing.TB, node, state string, timeout time.Duration) *directorv1.GetNodeResponse {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := h.Node(t, node)
		if n.GetNode().GetState() == state {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: state %s after %s, want %s", node, n.GetNode().GetState(), timeout, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Audit is the director's audit trail.
func (h *Harness) Audit(t testing.TB) []*directorv1.AuditEntry {
	t.Helper()
	resp, err := h.Admin.ListAudit(context.Background(), connect.NewRequest(&directorv1.ListAuditRequest{Limit: 100000}))
	if err != nil {
		t.Fatalf("ListAudit: %v", err)
	}
	return resp.Msg.GetEntries()
}

// AuditKinds counts the audit entries by kind.
func (h *Harness) AuditKinds(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range h.Audit(t) {
		out[e.GetKind()]++
	}
	return out
}

// logWriter sends the director's log to the test's output.
type logWriter struct {
	t  testing.TB
	mu sync.Mutex
	on bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// testLogger logs at level into the test's output, until the test ends.
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	w := &logWriter{t: t, on: true}
	t.Cleanup(func() {
		w.mu.Lock()
		w.on = false
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// StoreValues is every key and value the director has in etcd (keys
// relative to its prefix), read with a client of its own.
func (h *Harness) StoreValues(t testing.TB) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := h.Store(t)
	defer s.Close()
	out := map[string][]byte{}
	if err := s.List(ctx, "", func(key string, _ int64, raw []byte) error {
		out[key] = append([]byte(nil), raw...)
		return nil
	}); err != nil {
		t.Fatalf("list the director's store: %v", err)
	}
	return out
}

// Store is a client of its own on the director's etcd prefix, for tests
// that read or write the director's records behind its back. Close it.
func (h *Harness) Store(t testing.TB) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := h.Options.Etcd
	o.DataDir, o.Logger = "", nil
	s, err := etcdstore.Open(ctx, o)
	if err != nil {
		t.Fatalf("open the director's store: %v", err)
	}
	return s
}
