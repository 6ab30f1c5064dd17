package etcdstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// stoppedMember is a Store whose only member has stopped: nothing
// answers its requests.
func stoppedMember(t *testing.T, timeout time.Duration) *Store {
	t.Helper()
	a, err := Open(t.Context(), Options{DataDir: tempDir(t), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := Open(t.Context(), Options{Endpoints: []string{a.Endpoint()}, RequestTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	stopMember(a)
	return b
}

// stopMember stops a's embedded member, leaving its Store open.
func stopMember(a *Store) {
	a.etcd.Close()
	a.etcd = nil // Close would close it again (embed panics)
}

func TestRequestTimeoutIsUnavailable(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s := stoppedMember(t, timeout)
	want := "etcd: no answer within 300ms: cluster without quorum or unreachable"
	ops := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, "k", nil); return err }},
		{"Put", func(ctx context.Context) error { return s.Put(ctx, "k", 1, 0) }},
		{"Put with ttl", func(ctx context.Context) error { return s.Put(ctx, "k", 1, time.Minute) }},
		{"Delete", func(ctx context.Context) error { return s.Delete(ctx, "k") }},
		{"List", func(ctx context.Context) error {
			return s.List(ctx, "", func(string, int64, []byte) error { return nil })
		}},
		{"Txn", func(ctx context.Context) error {
			_, err := s.Txn().IfAbsent("k").Put("k", 1, 0).Commit(ctx)
			return err
		}},
		{"KeepAliveLease", func(ctx context.Context) error { _, err := s.KeepAliveLease(ctx, 5*time.Second); return err }},
		{"Campaign", func(ctx context.Context) error { _, err := s.Campaign(ctx, "e", "me", 5*time.Second); return err }},
		{"Leader", func(ctx context.Context) error { _, err := s.Leader(ctx, "e"); return err }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			start := time.Now()
			err := op.do(t.Context())
			took := time.Since(start)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("got %v; want ErrUnavailable", err)
			}
			var ue *UnavailableError
			if !errors.As(err, &ue) || ue.Timeout != timeout {
				t.Errorf("got %#v; want an *UnavailableError with Timeout %s", err, timeout)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q; want it to say %q", err, want)
			}
			if took < timeout || took > timeout+time.Second {
				t.Errorf("failed after %s; want about %s", took, timeout)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("errors.Is(%v, context.DeadlineExceeded): got true; want false (the caller's deadline did not pass)", err)
			}
		})
	}
	// The caller's own sooner deadline and cancel stay theirs.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.Put(ctx, "k", 1, 0); errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put with a 50ms ctx: got %v; want context.DeadlineExceeded, not ErrUnavailable", err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := s.Put(ctx, "k", 1, 0); errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Put cancelled by the caller: got %v; want context.Canceled, not ErrUnavailable", err)
	}
}

func TestRequestTimeoutDefault(t *testing.T) {
	s := newStore(t)
	if s.requestTimeout != 3*time.Second || DefaultRequestTimeout != 3*time.Second {
		t.Errorf("request timeout: got %s (default %s); want 3s", s.requestTimeout, DefaultRequestTimeout)
	}
	want := "etcd: no answer within 3s: cluster without quorum or unreachable"
	if got := (&UnavailableError{Timeout: s.requestTimeout}).Error(); got != want {
		t.Errorf("got %q; want %q", got, want)
	}
	// A ctx with a longer deadline is bounded too; a live member answers.
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	if err := s.Put(ctx, "k", 1, 0); err != nil {
		t.Fatal(err)
	}
}

func TestKeepAliveLease(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	l, err := s.KeepAliveLease(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l.ID() == 0 || l.TTL() < 2*time.Second {
		t.Fatalf("lease %x ttl %s; want an id and >= 2s", int64(l.ID()), l.TTL())
	}
	if _, err := s.Txn().IfAbsent("sessions/n1").PutLease("sessions/n1", rec{V: 1}, l).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLease(ctx, "replicas/r1", rec{V: 1}, l); err != nil {
		t.Fatal(err)
	}
	// Kept alive well past its TTL.
	select {
	case <-l.Lost():
		t.Fatal("lease lost while etcd is up")
	case <-time.After(4 * time.Second):
	}
	for _, k := range []string{"sessions/n1", "replicas/r1"} {
		if _, err := s.Get(ctx, k, nil); err != nil {
			t.Errorf("%s after 2 TTLs: %v; want it kept", k, err)
		}
	}
	if err := l.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	default:
		t.Error("Lost not closed after Revoke")
	}
	if _, err := s.Get(ctx, "sessions/n1", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("key after Revoke: got %v; want ErrNotFound at once", err)
	}
	if err := s.PutLease(ctx, "sessions/n1", rec{}, l); !errors.Is(err, ErrLeaseGone) {
		t.Errorf("PutLease on a revoked lease: got %v; want ErrLeaseGone", err)
	}
	if err := l.Revoke(ctx); err != nil {
		t.Errorf("second Revoke: %v", err)
	}
}

func TestKeepAliveLeaseLost(t *testing.T) {
	t.Run("revoked elsewhere", func(t *testing.T) {
		s := newStore(t)
		l, err := s.KeepAliveLease(t.Context(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shared.Client().Revoke(t.Context(), l.ID()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Lost():
		case <-time.After(3 * time.Second):
			t.Fatal("Lost not closed within 3s of a revoke by another client")
		}
	})
	t.Run("etcd gone for longer than the TTL", func(t *testing.T) {
		a, err := Open(t.Context(), Options{DataDir: tempDir(t), UnsafeNoFsync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := Open(t.Context(), Options{Endpoints: []string{a.Endpoint()}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		l, err := b.KeepAliveLease(t.Context(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// etcd's graceful stop can itself take seconds on a loaded machine
		// (once 8 s in CI), answering keep-alives meanwhile: etcd is gone
		// when it returns
		start := time.Now()
		stopMember(a)
		gone := time.Now()
		select {
		case <-l.Lost():
			if took := time.Since(gone); took > l.TTL()+time.Second {
				t.Errorf("Lost %s after etcd went (its stop took %s); want within the TTL (%s) and a second", took, gone.Sub(start), l.TTL())
			}
		case <-time.After(l.TTL() + 3*time.Second):
			t.Fatal("Lost not closed though etcd is gone for longer than the TTL")
		}
	})
	t.Run("ctx ends", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		l, err := s.KeepAliveLease(ctx, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		select {
		case <-l.Lost():
		case <-time.After(time.Second):
			t.Fatal("Lost not closed after ctx ended")
		}
	})
}

func TestCampaign(t *testing.T) {
	a := newStore(t)
	// b2 shares a's prefix: two replicas of one director
	b2, err := Open(t.Context(), Options{Endpoints: []string{shared.Endpoint()}, Prefix: a.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	ctx := t.Context()
	la, err := a.Campaign(ctx, "singletons", "r1", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := b2.Leader(ctx, "singletons"); err != nil || v != "r1" {
		t.Fatalf("Leader: got %q, %v; want r1", v, err)
	}
	won := make(chan *Leadership, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := b2.Campaign(ctx, "singletons", "r2", 2*time.Second)
		if err != nil {
			errs <- err
			return
		}
		won <- l
	}()
	select {
	case <-won:
		t.Fatal("second candidate won while the first leads")
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(500 * time.Millisecond):
	}
	// A campaign whose ctx ends gives up.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b2.Campaign(cctx, "singletons", "r3", 2*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("campaign with an ending ctx: got %v; want context.DeadlineExceeded", err)
	}
	start := time.Now()
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	default:
		t.Error("Done not closed after Resign")
	}
	var lb *Leadership
	select {
	case lb = <-won:
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(2 * time.Second):
		t.Fatal("second candidate did not win within 2s of a resign")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("handover after a resign took %s; want well under the TTL", took)
	}
	if v, _ := a.Leader(ctx, "singletons"); v != "r2" {
		t.Errorf("Leader after the handover: got %q; want r2", v)
	}
	// The leader's process dies (its Store closes without resigning):
	// the other candidate wins once the lease expires.
	go func() {
		l, err := a.Campaign(ctx, "singletons", "r1", 2*time.Second)
		if err != nil {
			errs <- err
			return
		}
		won <- l
	}()
	time.Sleep(200 * time.Millisecond)
	b2.Close()
	start = time.Now()
	select {
	case <-lb.Done():
	case <-time.After(time.Second):
		t.Error("Done not closed after the Store closed")
	}
	select {
	case l := <-won:
		defer l.Resign(ctx)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("the other candidate did not win within 5s of the leader's death (TTL 2s)")
	}
	t.Logf("takeover after the leader's Store closed: %s", time.Since(start).Round(time.Millisecond))
}

// What etcd says when it has no quorum becomes ErrUnavailable; anything
// else, and the caller's own ctx, stays as it was.
func TestUnavailableMapping(t *testing.T) {
	s := &Store{requestTimeout: time.Hour}
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	other := errors.New("etcdserver: mvcc: required revision has been compacted")
	cases := []struct {
		name    string
		parent  context.Context
		took    time.Duration
		err     error
		want    string // the error's text; "" for err itself
		isUnav  bool
		timeout time.Duration
	}{
		{"member gave up after 7s", live, 7 * time.Second, rpctypes.ErrTimeout, "etcd: no answer within 7s: cluster without quorum or unreachable", true, 7 * time.Second},
		{"leader lost mid-request", live, 1200 * time.Millisecond, rpctypes.ErrTimeoutDueToLeaderFail, "etcd: no answer within 1.2s: cluster without quorum or unreachable", true, 1200 * time.Millisecond},
		{"no leader", live, 0, rpctypes.ErrNoLeader, "etcd: cluster without quorum or unreachable: etcdserver: no leader", true, 0},
		{"grpc unavailable", live, 0, status.Error(codes.Unavailable, "connection refused"), "etcd: cluster without quorum or unreachable: rpc error: code = Unavailable desc = connection refused", true, 0},
		{"other error", live, 0, other, "", false, 0},
		{"caller cancelled", cancelled, 0, context.Canceled, "", false, 0},
		{"nil", live, 0, nil, "", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := s.unavailable(c.parent, c.parent, time.Now().Add(-c.took), c.err)
			if errors.Is(got, ErrUnavailable) != c.isUnav {
				t.Fatalf("got %v; want ErrUnavailable %v", got, c.isUnav)
			}
			if !c.isUnav {
				if got != c.err {
					t.Errorf("got %v; want %v as is", got, c.err)
				}
				return
			}
			if got.Error() != c.want {
				t.Errorf("got %q; want %q", got, c.want)
			}
			var ue *UnavailableError
			if errors.As(got, &ue) && ue.Timeout != c.timeout {
				t.Errorf("Timeout: got %s; want %s", ue.Timeout, c.timeout)
			}
		})
	}
}
