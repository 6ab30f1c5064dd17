package director_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/internal/testutil"
)

// No token secret and no private key ever reaches the director's log, its
// audit trail or its etcd values: through a whole life of enrolments,
// failures, retries, replays, sessions and revocations.
func TestNoSecretsInLogsAuditOrStore(t *testing.T) {
	var logs testutil.Buffer
	h := directortest.Start(t, func(o *director.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.Etcd.Logger = o.Logger
	})
	ctx := context.Background()
	var secrets, keys []string
	join := func(req *directorv1.CreateTokenRequest) enroll.Join {
		j := h.Token(t, req)
		secrets = append(secrets, j.Secret())
		return j
	}
	key := newKey(t)
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := enroll.MarshalKey(key)
	raw, err := key.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	keys = append(keys, hex.EncodeToString(der), hex.EncodeToString(raw), string(pk),
		strings.Split(string(pem.EncodeToMemory(&pem.Block{Type: "X", Bytes: der})), "\n")[1])

	j := join(nil)
	e, err := h.EnrollWith(ctx, j, key, "leak-a")
	if err != nil {
		t.Fatal(err)
	}
	h.EnrollWith(ctx, j, key, "leak-a")                                                         // retry
	h.EnrollWith(ctx, j, newKey(t), "leak-a")                                                   // replay
	h.EnrollWith(ctx, join(&directorv1.CreateTokenRequest{NodeName: "x"}), newKey(t), "leak-b") // name mismatch
	bad, _ := enroll.NewJoin(j.ID(), strings.Repeat("z", enroll.SecretLen), j.Addr(), j.Pin())
	secrets = append(secrets, bad.Secret())
	h.EnrollWith(ctx, bad, newKey(t), "leak-c") // wrong secret
	// A malformed token: a secret alone, without the id.
	lone := join(nil)
	h.EnrollClient().Enroll(ctx, connect.NewRequest(&directorv1.EnrollRequest{Token: lone.Secret()}))
	h.EnrollClient().Enroll(ctx, connect.NewRequest(&directorv1.EnrollRequest{Token: lone.Secret() + "." + lone.Secret()}))
	h.Admin.ListTokens(ctx, connect.NewRequest(&directorv1.ListTokensRequest{}))

	agent, hc := h.AgentClient(e.Cert)
	defer hc.CloseIdleConnections()
	s, _ := openSession(t, agent, e.NodeID)
	s.heartbeat(1)
	h.Admin.RevokeNode(ctx, connect.NewRequest(&directorv1.RevokeNodeRequest{Id: e.NodeID}))

	var audit bytes.Buffer
	for _, a := range h.Audit(t) {
		b, err := protojson.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		audit.Write(b)
		audit.WriteByte('\n')
	}
	if audit.Len() == 0 || logs.String() == "" {
		t.Fatal("nothing captured: the test would prove nothing")
	}
	var store bytes.Buffer
	for k, v := range h.StoreValues(t) {
		store.WriteString(k + " ")
		store.Write(v)
		store.WriteByte('\n')
	}
	for what, text := range map[string]string{"log": logs.String(), "audit": audit.String(), "etcd": store.String()} {
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("the %s holds a token secret", what)
			}
		}
		for _, k := range keys {
			if strings.Contains(text, k) {
				t.Errorf("the %s holds the node's private key", what)
			}
		}
	}
	if !strings.Contains(audit.String(), j.ID()) {
		t.Errorf("the audit does not name the token id %s: the scan looked at the wrong thing", j.ID())
	}
}
