package director_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/internal/testutil"
)

// childSocketEnv makes the test binary, run as a child, call the admin
// socket it names and print the outcome.
const childSocketEnv = "VIRTCON_DIRECTORTEST_ADMIN_SOCKET"

func init() {
	sock := os.Getenv(childSocketEnv)
	if sock == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := director.AdminClient(sock).ListTokens(ctx, connect.NewRequest(&directorv1.ListTokensRequest{}))
	switch {
	case err == nil:
		fmt.Println("result: ok")
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		fmt.Println("result: permission_denied")
	default:
		fmt.Println("result: error:", err)
	}
	os.Exit(0)
}

// Another user is refused on the admin socket: by the socket's mode, and,
// with the mode opened up, by the peer credentials check.
func TestAdminSocketRefusesOtherUser(t *testing.T) {
	testutil.RequireRoot(t, "runs a client as the user nobody")
	h := directortest.Start(t)
	st, err := os.Stat(h.D.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("admin socket mode %o, want 600", m)
	}
	// The child is this test binary, copied where nobody may run it.
	if err := os.Chmod(h.DataDir, 0o711); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(h.DataDir, "child.test")
	copyFile(t, os.Args[0], bin)
	run := func() string {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), childSocketEnv+"="+h.D.AdminSocket())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child as nobody: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := run(); !strings.Contains(out, "result: error:") || !strings.Contains(out, "permission denied") {
		t.Errorf("nobody on the 0600 socket: %q, want a connect error (permission denied)", out)
	}
	if err := os.Chmod(h.D.AdminSocket(), 0o666); err != nil {
		t.Fatal(err)
	}
	if out := run(); !strings.Contains(out, "result: permission_denied") {
		t.Errorf("nobody on a 0666 socket: %q, want PermissionDenied from the peer check", out)
	}
	var denied []string
	for _, e := range h.Audit(t) {
		if e.GetKind() == "admin.deny" {
			denied = append(denied, e.GetActor())
		}
	}
	if len(denied) != 1 || denied[0] != "nobody" {
		t.Errorf("admin.deny actors %q, want [nobody]", denied)
	}
	// Root (this process) is let in, and named as the creator.
	h.Token(t, nil)
	toks, err := h.Admin.ListTokens(context.Background(), connect.NewRequest(&directorv1.ListTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := toks.Msg.GetTokens()[0].GetCreatedBy(); got != "root" {
		t.Errorf("created_by %q, want root", got)
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCreateTokenLimits(t *testing.T) {
	h := directortest.Start(t)
	ctx := context.Background()
	j := h.Token(t, nil)
	if j.Addr() != h.Addr || j.Pin() != h.Pin {
		t.Errorf("join %s: want address %s and pin %s", j, h.Addr, h.Pin)
	}
	resp, err := h.Admin.ListTokens(ctx, connect.NewRequest(&directorv1.ListTokensRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	tok := resp.Msg.GetTokens()[0]
	if got := time.Duration(tok.GetExpiresAtUnixMs()-tok.GetCreatedAtUnixMs()) * time.Millisecond; got != time.Hour || tok.GetMaxUses() != 1 || tok.GetState() != "active" {
		t.Errorf("default token: ttl %s, uses %d, state %s; want 1h, 1, active", got, tok.GetMaxUses(), tok.GetState())
	}
	other := h.Token(t, &directorv1.CreateTokenRequest{Address: "dir.example:8443"})
	if other.Addr() != "dir.example:8443" {
		t.Errorf("address override: join names %s", other.Addr())
	}
	for name, req := range map[string]*directorv1.CreateTokenRequest{
		"ttl over 24h":  {TtlMs: (25 * time.Hour).Milliseconds()},
		"ttl under 1m":  {TtlMs: 1000},
		"uses 1001":     {MaxUses: 1001},
		"bad node name": {NodeName: "web 01"},
		"bad address":   {Address: "no-port"},
	} {
		_, err := h.Admin.CreateToken(ctx, connect.NewRequest(req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: err %v, want InvalidArgument", name, err)
		}
	}
}

// Nodes are found by id or hostname; a Ready node cannot be forgotten,
// an Offline one can (and its certificate is revoked with it).
func TestGetAndForgetNode(t *testing.T) {
	h := directortest.Start(t)
	ctx := context.Background()
	node, cert := h.EnrollAs(t, nil, "forget-me")
	if got := h.Node(t, "forget-me").GetNode().GetId(); got != node {
		t.Errorf("GetNode by hostname: %s, want %s", got, node)
	}
	n := h.Node(t, node)
	if n.GetHost().GetHostname() != "forget-me" || len(n.GetCapabilities()) != 2 || n.GetCapabilities()[0].GetAvailable() {
		t.Errorf("GetNode: host %v capabilities %v, want forget-me, kvm unavailable + tcg", n.GetHost(), n.GetCapabilities())
	}
	if _, err := h.Admin.GetNode(ctx, connect.NewRequest(&directorv1.GetNodeRequest{Id: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetNode nope: %v, want NotFound", err)
	}
	_, err := h.Admin.ForgetNode(ctx, connect.NewRequest(&directorv1.ForgetNodeRequest{Id: node}))
	wantCode(t, err, connect.CodeFailedPrecondition)

	h.Clock.Advance(91 * time.Second)
	if _, err := h.Admin.ForgetNode(ctx, connect.NewRequest(&directorv1.ForgetNodeRequest{Id: node})); err != nil {
		t.Fatalf("forget an Offline node: %v", err)
	}
	if n := nodeCount(t, h); n != 0 {
		t.Errorf("nodes after forget: %d, want 0", n)
	}
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	_, req := renewReq(t)
	_, err = agent.RenewCertificate(ctx, req)
	wantCode(t, err, connect.CodeUnauthenticated)
	kinds := h.AuditKinds(t)
	if kinds["node.forget"] != 1 || kinds["cert.revoke"] != 1 {
		t.Errorf("audit kinds %v, want node.forget and cert.revoke", kinds)
	}
}

// FollowAudit streams the entries written after it started.
func TestFollowAudit(t *testing.T) {
	h := directortest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := h.Admin.FollowAudit(ctx, connect.NewRequest(&directorv1.FollowAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	stream.ResponseHeader() // the watch is on
	j := h.Token(t, nil)
	if !stream.Receive() {
		t.Fatalf("no entry: %v", stream.Err())
	}
	if e := stream.Msg(); e.GetKind() != "token.create" || e.GetTokenId() != j.ID() {
		t.Errorf("followed %v, want token.create of %s", e, j.ID())
	}
}

// The agents' listener speaks HTTP/2 only: an HTTP/1.1 client gets
// nothing.
func TestHTTP1Refused(t *testing.T) {
	h := directortest.Start(t)
	var p http.Protocols
	p.SetHTTP1(true)
	cfg := h.ClientTLS(nil)
	cfg.NextProtos = []string{"http/1.1"}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &p}}
	defer c.CloseIdleConnections()
	_, err := directorv1connect.NewEnrollServiceClient(c, h.URL()).Enroll(context.Background(),
		connect.NewRequest(&directorv1.EnrollRequest{Token: "x"}))
	if err == nil {
		t.Fatal("an HTTP/1.1 client got an answer")
	}
	if got := h.D.Stats().EnrollAttempts; got != 0 {
		t.Errorf("EnrollAttempts = %d, want 0", got)
	}
}
