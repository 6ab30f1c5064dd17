package directorcli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director"
)

// testNow is the fixed clock of the golden files.
var testNow = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

func ms(t time.Time) int64 { return t.UnixMilli() }

// testNodes are nodes in every state, in no particular order.
func testNodes() []*directorv1.NodeInfo {
	until := testNow.Add(29 * 24 * time.Hour)
	return []*directorv1.NodeInfo{
		{Id: "9b2f6c1e-0d4a-4c3b-8e5f-7a6b5c4d3e2f", HostUuid: "4c4c4544-0042-3510-8052-b4c04f4e3232", Hostname: "kvm-02",
			State: "Offline", LastSeenUnixMs: ms(testNow.Add(-5 * time.Minute)), CertSerial: "2a", CertNotAfterUnixMs: ms(until),
			AgentVersion: "0.13.0", Address: "192.0.2.12:50432", EnrolledAtUnixMs: ms(testNow.Add(-48 * time.Hour)),
			StateSinceUnixMs: ms(testNow.Add(-3*time.Minute - 30*time.Second))},
		{Id: "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", HostUuid: "03b1f0a2-5c8e-4d2f-9a61-7e3c2b1d0f9e", Hostname: "kvm-01",
			State: "Ready", LastSeenUnixMs: ms(testNow.Add(-3 * time.Second)), CertSerial: "1f", CertNotAfterUnixMs: ms(until),
			AgentVersion: "0.13.0", Address: "192.0.2.11:41822", Connected: true, EnrolledAtUnixMs: ms(testNow.Add(-26 * time.Hour)),
			TaskKinds: []string{"create-vm", "start-vm", "stop-vm", "collect-diagnostics"}, ReplicaId: "r1",
			StateSinceUnixMs: ms(testNow.Add(-2 * time.Hour))},
		{Id: "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9", HostUuid: "7f0e1d2c-3b4a-4958-a6b7-c8d9e0f1a2b3", Hostname: "kvm-03",
			State: "Degraded", LastSeenUnixMs: ms(testNow.Add(-45 * time.Second)), CertSerial: "3c", CertNotAfterUnixMs: ms(until),
			AgentVersion: "0.12.1", Address: "[2001:db8::13]:39000", Connected: true, EnrolledAtUnixMs: ms(testNow.Add(-72 * time.Hour)),
			StateSinceUnixMs: ms(testNow.Add(-15 * time.Second))},
		{Id: "c0ffee00-1111-4222-8333-444455556666", HostUuid: "aa11bb22-cc33-4d44-8e55-ff6677889900", Hostname: "old-box",
			State: "Revoked", CertSerial: "0b", CertNotAfterUnixMs: ms(testNow.Add(-24 * time.Hour)),
			AgentVersion: "0.11.0", Address: "198.51.100.7:40000", EnrolledAtUnixMs: ms(testNow.Add(-40 * 24 * time.Hour)),
			RevokedAtUnixMs: ms(testNow.Add(-30 * time.Hour)), RevokeReason: "decommissioned", StateSinceUnixMs: ms(testNow.Add(-30 * time.Hour))},
		// a node not heard from since the director started: lastSeen null
		{Id: "d00dfeed-aaaa-4bbb-8ccc-dddddddddddd", HostUuid: "12345678-9abc-4def-8123-456789abcdef", Hostname: "kvm-04",
			State: "Offline", CertSerial: "4d", CertNotAfterUnixMs: ms(until), AgentVersion: "0.13.0",
			EnrolledAtUnixMs: ms(testNow.Add(-10 * 24 * time.Hour))},
	}
}

// fakeAdmin is an AdminService whose answers a test sets; what it is not
// given answers Unimplemented.
type fakeAdmin struct {
	directorv1connect.UnimplementedAdminServiceHandler
	calls atomic.Int32

	nodes       []*directorv1.NodeInfo
	getNode     func(*directorv1.GetNodeRequest) (*directorv1.GetNodeResponse, error)
	createToken func(*directorv1.CreateTokenRequest) (*directorv1.CreateTokenResponse, error)
	revokeNode  func(*directorv1.RevokeNodeRequest) (*directorv1.RevokeNodeResponse, error)
	forgetNode  func(*directorv1.ForgetNodeRequest) error
	listErr     error
}

func (f *fakeAdmin) ListNodes(ctx context.Context, r *connect.Request[directorv1.ListNodesRequest]) (*connect.Response[directorv1.ListNodesResponse], error) {
	f.calls.Add(1)
	if f.listErr != nil {
		return nil, f.listErr
	}
	return connect.NewResponse(&directorv1.ListNodesResponse{Nodes: f.nodes}), nil
}

func (f *fakeAdmin) GetNode(ctx context.Context, r *connect.Request[directorv1.GetNodeRequest]) (*connect.Response[directorv1.GetNodeResponse], error) {
	f.calls.Add(1)
	if f.getNode == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("no GetNode"))
	}
	res, err := f.getNode(r.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (f *fakeAdmin) CreateToken(ctx context.Context, r *connect.Request[directorv1.CreateTokenRequest]) (*connect.Response[directorv1.CreateTokenResponse], error) {
	f.calls.Add(1)
	res, err := f.createToken(r.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (f *fakeAdmin) RevokeNode(ctx context.Context, r *connect.Request[directorv1.RevokeNodeRequest]) (*connect.Response[directorv1.RevokeNodeResponse], error) {
	f.calls.Add(1)
	res, err := f.revokeNode(r.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (f *fakeAdmin) ForgetNode(ctx context.Context, r *connect.Request[directorv1.ForgetNodeRequest]) (*connect.Response[directorv1.ForgetNodeResponse], error) {
	f.calls.Add(1)
	if err := f.forgetNode(r.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&directorv1.ForgetNodeResponse{}), nil
}

// shortDir is a temporary --data short enough for a unix socket path.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "vdcli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// serveFake serves f on dir/admin.sock until the test ends.
func serveFake(t *testing.T, dir string, f *fakeAdmin) { serveHandler(t, dir, f) }

// serveAudit serves an auditFake on dir/admin.sock until the test ends.
func serveAudit(t *testing.T, dir string, f *auditFake) { serveHandler(t, dir, f) }

// serveHandler serves h on dir/admin.sock until the test ends.
func serveHandler(t *testing.T, dir string, h directorv1connect.AdminServiceHandler) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(dir, director.AdminSocketName))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(directorv1connect.NewAdminServiceHandler(h))
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// runCLI runs virt-director with args against --data dir at the fixed
// clock and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		Now: func() time.Time { return testNow }, Loc: time.UTC}
	code := runEnv(context.Background(), append([]string{"--data", dir}, args...), env)
	return out.String(), errOut.String(), code
}

// auditFake answers ListAudit with listed and FollowAudit with followed,
// then ends the stream, or, with hold, waits for the client to go.
type auditFake struct {
	fakeAdmin
	listed, followed []*directorv1.AuditEntry
	hold             bool
	following        chan struct{}
	listReq          *directorv1.ListAuditRequest
}

func (f *auditFake) ListAudit(ctx context.Context, r *connect.Request[directorv1.ListAuditRequest]) (*connect.Response[directorv1.ListAuditResponse], error) {
	f.listReq = r.Msg
	return connect.NewResponse(&directorv1.ListAuditResponse{Entries: f.listed}), nil
}

func (f *auditFake) FollowAudit(ctx context.Context, r *connect.Request[directorv1.FollowAuditRequest], s *connect.ServerStream[directorv1.AuditEntry]) error {
	for _, e := range f.followed {
		if err := s.Send(e); err != nil {
			return err
		}
	}
	if f.following != nil {
		close(f.following)
	}
	if f.hold {
		<-ctx.Done()
	}
	return nil
}
