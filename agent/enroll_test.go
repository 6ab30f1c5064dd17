package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/testutil/fakehost"
	"github.com/virtcon/virtcon/paths"
)

// fakeEnroll is an EnrollService that signs every CSR it gets (it checks
// no token), served as the director serves it: TLS 1.3, HTTP/2 only, the
// chain [leaf, intermediate, root] for 127.0.0.1. Tests that need the
// real director's rules use directortest.
type fakeEnroll struct {
	ca    *testCA
	addr  string
	calls atomic.Int64
	// onCall runs in the handler before it signs; reply may change the
	// response.
	onCall func(req *directorv1.EnrollRequest)
	reply  func(resp *directorv1.EnrollResponse)

	mu    sync.Mutex
	certs map[string]*x509.Certificate // by SPKI: the same key, the same certificate
}

func startFakeEnroll(t *testing.T) *fakeEnroll {
	t.Helper()
	f := &fakeEnroll{ca: newTestCA(t), certs: map[string]*x509.Certificate{}}
	mux := http.NewServeMux()
	mux.Handle(directorv1connect.NewEnrollServiceHandler(f))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{f.ca.serving(t)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f.addr = srv.Listener.Addr().String()
	return f
}

func (f *fakeEnroll) Enroll(ctx context.Context, req *connect.Request[directorv1.EnrollRequest]) (*connect.Response[directorv1.EnrollResponse], error) {
	f.calls.Add(1)
	if f.onCall != nil {
		f.onCall(req.Msg)
	}
	csr, err := enroll.ParseCSR(req.Msg.GetCsrDer())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.certs[string(csr.RawSubjectPublicKeyInfo)]
	if !ok {
		if c, err = f.ca.signNode(csr.PublicKey.(*ecdsa.PublicKey), testNodeID, time.Now().Add(-5*time.Minute), time.Now().Add(enroll.CertLifetime)); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		f.certs[string(csr.RawSubjectPublicKeyInfo)] = c
	}
	resp := &directorv1.EnrollResponse{NodeId: testNodeID, CertDer: c.Raw, CaChainDer: [][]byte{f.ca.inter.Raw, f.ca.root.Raw}}
	if f.reply != nil {
		f.reply(resp)
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeEnroll) join(t *testing.T, pin string) enroll.Join {
	t.Helper()
	j, err := enroll.NewJoin("ab12cd34", "s3cr3tvalue0123456789abcdefghijk", f.addr, pin)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// testHost is the host services on a temp layout, reading the pvm-build
// fixture as the host (no probe, no QEMU run, no real /proc scanned).
func testHost(t *testing.T) *host.Host {
	t.Helper()
	return host.New(host.Options{Layout: paths.New(t.TempDir()), HostRoot: fakehost.Tree(t, "pvm-build")})
}

// countingDial counts the TCP connections made.
func countingDial(n *atomic.Int64) DialFunc {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		return d.DialContext(ctx, network, addr)
	}
}

func TestEnrollFake(t *testing.T) {
	t.Parallel()
	f := startFakeEnroll(t)
	h := testHost(t)
	l := h.Layout
	var sawPending atomic.Bool
	f.onCall = func(req *directorv1.EnrollRequest) {
		// the key is on disk, 0600, before the CSR reaches the director
		k, err := loadPendingKey(l)
		csr, cerr := x509.ParseCertificateRequest(req.GetCsrDer())
		st, serr := os.Stat(PendingKeyFile(l))
		if err == nil && cerr == nil && serr == nil && k != nil && st.Mode().Perm() == 0o600 &&
			k.PublicKey.Equal(csr.PublicKey) {
			sawPending.Store(true)
		}
		if req.GetToken() != "ab12cd34.s3cr3tvalue0123456789abcdefghijk" || req.GetHost().GetAgentVersion() == "" || len(req.GetCapabilities()) != len(capabilityChecks) {
			t.Errorf("request: token, host facts %v, %d capabilities", req.GetHost(), len(req.GetCapabilities()))
		}
	}
	s, err := Enroll(context.Background(), h, f.join(t, enroll.SPKIPin(f.ca.root)), EnrollOptions{})
	if err != nil {
		t.Fatalf("Enroll: %v", err)
	}
	if !sawPending.Load() {
		t.Errorf("the pending key was not on disk (0600, the CSR's key) when the director got the CSR")
	}
	if !s.Enrolled || s.NodeID != testNodeID || s.Director != f.addr || s.Pin != enroll.SPKIPin(f.ca.root) {
		t.Errorf("status %+v", s)
	}
	if _, err := os.Stat(PendingKeyFile(l)); !os.IsNotExist(err) {
		t.Errorf("pending key after success: %v; want it gone", err)
	}
	// a second enrolment of an enrolled host is refused, without a call
	if _, err := Enroll(context.Background(), h, f.join(t, enroll.SPKIPin(f.ca.root)), EnrollOptions{}); !errors.Is(err, ErrAlreadyEnrolled) {
		t.Errorf("second Enroll: %v; want ErrAlreadyEnrolled", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("director called %d times; want 1", n)
	}
}

// A wrong pin fails the TLS handshake: the director never gets the
// request (its handler is not called), nothing is stored.
func TestEnrollWrongPinFake(t *testing.T) {
	t.Parallel()
	f := startFakeEnroll(t)
	h := testHost(t)
	other := newTestCA(t)
	_, err := Enroll(context.Background(), h, f.join(t, enroll.SPKIPin(other.root)), EnrollOptions{})
	if !errors.Is(err, enroll.ErrPinMismatch) || !strings.Contains(err.Error(), "nothing was sent") {
		t.Errorf("Enroll with a wrong pin: %v; want ErrPinMismatch, nothing sent", err)
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("the director's handler ran %d times; want 0", n)
	}
	if _, err := os.Stat(IdentityFile(h.Layout)); !os.IsNotExist(err) {
		t.Errorf("identity after a failed enrolment: %v", err)
	}
}

// No pin: refused before dialling, unless UnsafeSkipPin; then the CA the
// director answered with is trusted, and its pin recorded.
func TestEnrollNoPinFake(t *testing.T) {
	t.Parallel()
	f := startFakeEnroll(t)
	h := testHost(t)
	var dials atomic.Int64
	_, err := Enroll(context.Background(), h, f.join(t, ""), EnrollOptions{DialContext: countingDial(&dials)})
	if !errors.Is(err, enroll.ErrNoPin) || dials.Load() != 0 {
		t.Fatalf("Enroll without a pin: %v after %d dials; want ErrNoPin, no dial", err, dials.Load())
	}
	s, err := Enroll(context.Background(), h, f.join(t, ""), EnrollOptions{UnsafeSkipPin: true})
	if err != nil {
		t.Fatalf("Enroll with UnsafeSkipPin: %v", err)
	}
	if s.Pin != enroll.SPKIPin(f.ca.root) {
		t.Errorf("recorded pin %s; want the director's %s", s.Pin, enroll.SPKIPin(f.ca.root))
	}
}

// A reply whose root is not the pinned one, or whose certificate is for
// another key, stores nothing; the pending key stays for a retry.
func TestEnrollBadReplyFake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		reply func(f *fakeEnroll, t *testing.T) func(*directorv1.EnrollResponse)
		want  error
	}{
		{"another root", func(f *fakeEnroll, t *testing.T) func(*directorv1.EnrollResponse) {
			other := newTestCA(t)
			return func(r *directorv1.EnrollResponse) { r.CaChainDer = [][]byte{other.inter.Raw, other.root.Raw} }
		}, ErrBadReply},
		{"another key's certificate", func(f *fakeEnroll, t *testing.T) func(*directorv1.EnrollResponse) {
			k, _ := enroll.NewKey()
			c := f.ca.node(t, &k.PublicKey, testNodeID, time.Now(), time.Now().Add(time.Hour))
			return func(r *directorv1.EnrollResponse) { r.CertDer = c.Raw }
		}, ErrBadReply},
		{"another node id", func(f *fakeEnroll, t *testing.T) func(*directorv1.EnrollResponse) {
			return func(r *directorv1.EnrollResponse) { r.NodeId = "11111111-2222-4333-8444-555555555555" }
		}, ErrBadReply},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFakeEnroll(t)
			f.reply = tt.reply(f, t)
			h := testHost(t)
			_, err := Enroll(context.Background(), h, f.join(t, enroll.SPKIPin(f.ca.root)), EnrollOptions{})
			if !errors.Is(err, tt.want) {
				t.Errorf("Enroll: %v; want %v", err, tt.want)
			}
			for _, p := range []string{IdentityFile(h.Layout), CAFile(h.Layout), ConfigFile(h.Layout)} {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s after a bad reply: %v; want none", p, err)
				}
			}
			if _, err := os.Stat(PendingKeyFile(h.Layout)); err != nil {
				t.Errorf("pending key after a bad reply: %v; want it kept for a retry", err)
			}
		})
	}
}

// A retry reuses the pending key: a director that lost nothing but its
// reply answers the same certificate.
func TestEnrollRetryReusesKeyFake(t *testing.T) {
	t.Parallel()
	f := startFakeEnroll(t)
	h := testHost(t)
	var csrs [][]byte
	f.onCall = func(req *directorv1.EnrollRequest) { csrs = append(csrs, req.GetCsrDer()) }
	lost := true
	f.reply = func(r *directorv1.EnrollResponse) {
		if lost {
			lost = false
			r.CertDer = nil // the reply is no good: as if lost
		}
	}
	join := f.join(t, enroll.SPKIPin(f.ca.root))
	if _, err := Enroll(context.Background(), h, join, EnrollOptions{}); err == nil {
		t.Fatal("first Enroll succeeded; want it to fail on the spoilt reply")
	}
	if _, err := Enroll(context.Background(), h, join, EnrollOptions{}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	a, _ := x509.ParseCertificateRequest(csrs[0])
	b, _ := x509.ParseCertificateRequest(csrs[1])
	if string(a.RawSubjectPublicKeyInfo) != string(b.RawSubjectPublicKeyInfo) {
		t.Errorf("the retry's CSR is for another key; want the pending one")
	}
}
