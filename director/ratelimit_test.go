package director_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/enroll"
)

// Failed enrolments from one source are audited up to a limit (20 a
// minute), then one entry says the source is refused, and it is: every
// Enroll from it, a valid one too, gets ResourceExhausted, unaudited,
// until the window ends. Before, each failure wrote an audit entry kept
// 30 days: anyone reaching the port could fill etcd.
func TestEnrollFailuresRateLimited(t *testing.T) {
	h := directortest.Start(t)
	ctx := context.Background()
	j := h.Token(t, nil)
	bad, err := enroll.NewJoin(j.ID(), "00000000000000000000000000000000", j.Addr(), j.Pin())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 25; i++ {
		_, err := h.EnrollWith(ctx, bad, newKey(t), "a")
		want := connect.CodeUnauthenticated
		if i > 20 {
			want = connect.CodeResourceExhausted
		}
		if got := connect.CodeOf(err); got != want {
			t.Fatalf("bad enrolment %d: %v, want %v", i, err, want)
		}
	}
	var fails, limits int
	for _, d := range auditDetails(t, h, "token.fail") {
		switch {
		case strings.HasPrefix(d, "rate limit: further attempts from 127.0.0.1 refused until "):
			limits++
		case d == "wrong secret":
			fails++
		default:
			t.Errorf("token.fail entry %q", d)
		}
	}
	if fails != 20 || limits != 1 {
		t.Errorf("token.fail entries: %d wrong secret and %d rate limit, want 20 and 1", fails, limits)
	}
	// A valid token from the refused source: refused as well (the
	// source is most likely an attacker's), and the token not spent.
	_, err = h.EnrollWith(ctx, j, newKey(t), "a")
	wantCode(t, err, connect.CodeResourceExhausted)
	if n := len(h.Audit(t)); n != 1+21 { // token.create + 21
		t.Errorf("%d audit entries, want 22: refused attempts are not audited", n)
	}
	// The window ends: the source may enrol again.
	h.Clock.Advance(time.Minute)
	if _, err := h.EnrollWith(ctx, j, newKey(t), "a"); err != nil {
		t.Fatalf("valid enrolment after the window: %v", err)
	}
}

// Successes are never limited: 30 enrolments from one source in a
// minute all succeed.
func TestEnrollSuccessesNotLimited(t *testing.T) {
	h := directortest.Start(t)
	j := h.Token(t, &directorv1.CreateTokenRequest{MaxUses: 30})
	for i := 0; i < 30; i++ {
		if _, err := h.EnrollWith(context.Background(), j, newKey(t), "a"); err != nil {
			t.Fatalf("enrolment %d: %v", i, err)
		}
	}
}
