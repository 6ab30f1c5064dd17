package director_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director/directortest"
)

// probe makes one cheap call with cert on a connection of its own: a
// renewal with a CSR that cannot parse. The per-request check answers
// first: Unauthenticated for a refused certificate, else the handler
// says InvalidArgument and nothing is written.
func probe(t testing.TB, h *directortest.Harness, cert tls.Certificate) connect.Code {
	t.Helper()
	agent, hc := h.AgentClient(cert)
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := agent.RenewCertificate(ctx, connect.NewRequest(&directorv1.RenewCertificateRequest{CsrDer: []byte("x")}))
	return connect.CodeOf(err)
}

// renewWith renews the node's certificate over agent and returns the new
// identity.
func renewWith(t testing.TB, agent interface {
	RenewCertificate(context.Context, *connect.Request[directorv1.RenewCertificateRequest]) (*connect.Response[directorv1.RenewCertificateResponse], error)
}, node string) tls.Certificate {
	t.Helper()
	key, req := renewReq(t)
	resp, err := agent.RenewCertificate(context.Background(), req)
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	e, err := directortest.Identity(key, &directorv1.EnrollResponse{NodeId: node, CertDer: resp.Msg.GetCertDer(), CaChainDer: resp.Msg.GetCaChainDer()})
	if err != nil {
		t.Fatal(err)
	}
	return e.Cert
}

// A node renewing without end (an attacker holding its key) never holds
// more than two valid certificates, and revoking it still works: each
// renewal supersedes the node's other certificates but the caller's.
// Before, every renewal added a valid one, and past ~64 of them the
// revocation's single transaction went over etcd's 128 operations.
func TestRenewalsCannotOutgrowRevocation(t *testing.T) {
	h := directortest.Start(t)
	node, first := h.Enroll(t, nil)
	agent, hc := h.AgentClient(first)
	defer hc.CloseIdleConnections()
	certs := []tls.Certificate{first}
	for i := 0; i < 70; i++ {
		certs = append(certs, renewWith(t, agent, node))
	}
	var valid []int
	for i, c := range certs {
		switch code := probe(t, h, c); code {
		case connect.CodeInvalidArgument:
			valid = append(valid, i)
		case connect.CodeUnauthenticated:
		default:
			t.Fatalf("certificate %d: probe answered %v", i, code)
		}
	}
	if len(valid) != 2 || valid[0] != 0 || valid[1] != len(certs)-1 {
		t.Errorf("valid certificates after 70 renewals: %v, want only the caller's (0) and the newest (%d)", valid, len(certs)-1)
	}
	if _, err := h.Admin.RevokeNode(context.Background(), connect.NewRequest(&directorv1.RevokeNodeRequest{Id: node})); err != nil {
		t.Fatalf("RevokeNode after 70 renewals: %v", err)
	}
	for i, c := range certs {
		if code := probe(t, h, c); code != connect.CodeUnauthenticated {
			t.Errorf("certificate %d after the revocation: %v, want Unauthenticated", i, code)
		}
	}
}

// editNode rewrites nodes/<id> behind the director's back.
func editNode(t testing.TB, h *directortest.Harness, id string, edit func(map[string]any)) {
	t.Helper()
	s := h.Store(t)
	defer s.Close()
	var n map[string]any
	if _, err := s.Get(context.Background(), "nodes/"+id, &n); err != nil {
		t.Fatalf("read node %s: %v", id, err)
	}
	edit(n)
	if err := s.Put(context.Background(), "nodes/"+id, n, 0); err != nil {
		t.Fatalf("write node %s: %v", id, err)
	}
}

// A node holding more certificates than one transaction can revoke (a
// record from before renewals superseded them) is still revoked: the
// node's record first, then its serials in transactions of bounded size.
func TestRevokeNodeWithManyCertificates(t *testing.T) {
	h := directortest.Start(t)
	node, cert := h.Enroll(t, nil)
	const extra = 130
	notAfter := h.Clock.Now().Add(24 * time.Hour).UnixMilli()
	editNode(t, h, node, func(n map[string]any) {
		certs := n["certs"].([]any)
		for i := 0; i < extra; i++ {
			certs = append(certs, map[string]any{"serial": fmt.Sprintf("f00d%04x", i), "notAfter": notAfter, "issuedAt": 1})
		}
		n["certs"] = certs
	})
	if _, err := h.Admin.RevokeNode(context.Background(), connect.NewRequest(&directorv1.RevokeNodeRequest{Id: node})); err != nil {
		t.Fatalf("RevokeNode of a node with %d certificates: %v", extra+1, err)
	}
	revoked := 0
	for k := range h.StoreValues(t) {
		if strings.HasPrefix(k, "revoked/") {
			revoked++
		}
	}
	if revoked != extra+1 {
		t.Errorf("revoked/ holds %d serials, want %d", revoked, extra+1)
	}
	if got := h.AuditKinds(t)["cert.revoke"]; got != extra+1 {
		t.Errorf("cert.revoke audit entries %d, want %d", got, extra+1)
	}
	if code := probe(t, h, cert); code != connect.CodeUnauthenticated {
		t.Errorf("the node's certificate after the revocation: %v, want Unauthenticated", code)
	}
}

// A node whose record says revoked is refused on every request, and its
// live session cut, even when a serial of it is missing from revoked/ (a
// later write of the revocation failed, or was made by another replica
// that died halfway).
func TestRevokedNodeRefusedWhateverItsSerials(t *testing.T) {
	h := directortest.Start(t)
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
	editNode(t, h, node, func(n map[string]any) {
		n["revokedAt"] = h.Clock.Now().UnixMilli()
		n["revokeReason"] = "revoked by an admin"
	})
	select {
	case err := <-ended:
		wantCode(t, err, connect.CodeUnauthenticated)
	case <-time.After(2 * time.Second):
		t.Fatal("the revoked node's session still open 2 s after its record said revoked")
	}
	if code := probe(t, h, cert); code != connect.CodeUnauthenticated {
		t.Errorf("a request of the revoked node (serial not in revoked/): %v, want Unauthenticated", code)
	}
}
