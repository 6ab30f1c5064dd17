package director_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/enroll"
)

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := enroll.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func wantCode(t testing.TB, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %s", code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("err = %v (code %s), want code %s", err, got, code)
	}
}

// auditDetails are the details of the entries of kind.
func auditDetails(t testing.TB, h *directortest.Harness, kind string) []string {
	t.Helper()
	var out []string
	for _, e := range h.Audit(t) {
		if e.GetKind() == kind {
			out = append(out, e.GetDetail())
		}
	}
	return out
}

func nodeCount(t testing.TB, h *directortest.Harness) int {
	t.Helper()
	resp, err := h.Admin.ListNodes(context.Background(), connect.NewRequest(&directorv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Msg.GetNodes())
}

// 20 enrolments race for one single-use token: exactly one gets a node,
// the others are refused as replays.
func TestEnrollSingleUseRace(t *testing.T) {
	h := directortest.Start(t)
	join := h.Token(t, nil)
	const racers = 20
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		won     []string
		refused int
		other   []error
	)
	start := make(chan struct{})
	for i := 0; i < racers; i++ {
		key := newKey(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			e, err := h.EnrollWith(context.Background(), join, key, "racer")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, e.NodeID)
			case connect.CodeOf(err) == connect.CodeUnauthenticated:
				refused++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(won) != 1 || refused != racers-1 || len(other) != 0 {
		t.Fatalf("won %d, refused %d, other errors %v; want 1 won, %d refused", len(won), refused, other, racers-1)
	}
	if n := nodeCount(t, h); n != 1 {
		t.Errorf("nodes = %d, want 1", n)
	}
	if got := len(auditDetails(t, h, "enroll.replay")); got != racers-1 {
		t.Errorf("enroll.replay entries = %d, want %d", got, racers-1)
	}
	if st := h.D.Stats(); st.EnrollAttempts != racers || st.EnrollOK != 1 {
		t.Errorf("Stats = %+v, want %d attempts, 1 ok", st, racers)
	}
}

func TestEnrollRefusals(t *testing.T) {
	h := directortest.Start(t)
	ctx := context.Background()

	t.Run("expired", func(t *testing.T) {
		j := h.Token(t, &directorv1.CreateTokenRequest{TtlMs: (10 * time.Minute).Milliseconds()})
		h.Clock.Advance(10*time.Minute + time.Second)
		_, err := h.EnrollWith(ctx, j, newKey(t), "a")
		wantCode(t, err, connect.CodeUnauthenticated)
		if got := auditDetails(t, h, "token.expire"); len(got) != 1 {
			t.Errorf("token.expire entries %q, want 1", got)
		}
		// Listing it does not record the expiry twice.
		resp, err := h.Admin.ListTokens(ctx, connect.NewRequest(&directorv1.ListTokensRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range resp.Msg.GetTokens() {
			if tok.GetId() == j.ID() && tok.GetState() != "expired" {
				t.Errorf("token state %s, want expired", tok.GetState())
			}
		}
		if got := auditDetails(t, h, "token.expire"); len(got) != 1 {
			t.Errorf("after ListTokens: token.expire entries %q, want 1", got)
		}
	})

	t.Run("revoked", func(t *testing.T) {
		j := h.Token(t, nil)
		if _, err := h.Admin.RevokeToken(ctx, connect.NewRequest(&directorv1.RevokeTokenRequest{Id: j.ID()})); err != nil {
			t.Fatal(err)
		}
		_, err := h.EnrollWith(ctx, j, newKey(t), "a")
		wantCode(t, err, connect.CodeUnauthenticated)
	})

	t.Run("node name mismatch", func(t *testing.T) {
		j := h.Token(t, &directorv1.CreateTokenRequest{NodeName: "web-01"})
		_, err := h.EnrollWith(ctx, j, newKey(t), "web-02")
		wantCode(t, err, connect.CodePermissionDenied)
		// The token is not used up: the right host still enrols.
		if _, err := h.EnrollWith(ctx, j, newKey(t), "web-01"); err != nil {
			t.Fatalf("enroll as web-01: %v", err)
		}
	})

	t.Run("wrong secret", func(t *testing.T) {
		j := h.Token(t, nil)
		bad, err := enroll.NewJoin(j.ID(), "00000000000000000000000000000000", j.Addr(), j.Pin())
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.EnrollWith(ctx, bad, newKey(t), "a")
		wantCode(t, err, connect.CodeUnauthenticated)
	})

	t.Run("unknown id", func(t *testing.T) {
		id, secret, err := enroll.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		j, err := enroll.NewJoin(id, secret, h.Addr, h.Pin)
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.EnrollWith(ctx, j, newKey(t), "a")
		wantCode(t, err, connect.CodeUnauthenticated)
	})

	t.Run("bad csr", func(t *testing.T) {
		j := h.Token(t, nil)
		for name, csr := range map[string][]byte{"garbage": []byte("not a csr"), "empty": nil} {
			_, err := h.EnrollClient().Enroll(ctx, connect.NewRequest(&directorv1.EnrollRequest{
				Token: j.Token(), CsrDer: csr, Host: &directorv1.HostFacts{Hostname: "a"},
			}))
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("%s CSR: err %v, want InvalidArgument", name, err)
			}
		}
		// Not used up by the bad requests.
		if _, err := h.EnrollWith(ctx, j, newKey(t), "a"); err != nil {
			t.Fatalf("enroll after bad CSRs: %v", err)
		}
	})

	// Every refusal says the same to the caller; the audit has the reason.
	fails := auditDetails(t, h, "token.fail")
	for _, want := range []string{"expired", "revoked", "wrong secret", "unknown token id", "bad certificate request"} {
		found := false
		for _, f := range fails {
			if f == want {
				found = true
			}
		}
		if !found {
			t.Errorf("no token.fail entry %q in %q", want, fails)
		}
	}
}

// A retry with the same key after a lost reply gets the same certificate;
// another key with the used token is refused and audited as a replay.
func TestEnrollRetryAndReplay(t *testing.T) {
	h := directortest.Start(t)
	ctx := context.Background()
	j := h.Token(t, nil)
	key := newKey(t)
	first, err := h.EnrollWith(ctx, j, key, "a")
	if err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(5 * time.Minute)
	again, err := h.EnrollWith(ctx, j, key, "a")
	if err != nil {
		t.Fatalf("retry with the same key: %v", err)
	}
	if again.NodeID != first.NodeID || !bytes.Equal(again.Resp.GetCertDer(), first.Resp.GetCertDer()) {
		t.Errorf("retry got node %s and another certificate, want the same node %s and certificate", again.NodeID, first.NodeID)
	}

	_, err = h.EnrollWith(ctx, j, newKey(t), "a")
	wantCode(t, err, connect.CodeUnauthenticated)
	if got := auditDetails(t, h, "enroll.replay"); len(got) != 1 {
		t.Errorf("enroll.replay entries %q, want 1", got)
	}

	// Past the retry window, even the same key is refused.
	h.Clock.Advance(6 * time.Minute)
	_, err = h.EnrollWith(ctx, j, key, "a")
	wantCode(t, err, connect.CodeUnauthenticated)
	if n := nodeCount(t, h); n != 1 {
		t.Errorf("nodes = %d, want 1", n)
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "token refused" {
		t.Errorf("refusal message %q, want %q", ce.Message(), "token refused")
	}
}
