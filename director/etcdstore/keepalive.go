package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrLeaseGone is wrapped by a write on a KeepAliveLease that etcd no
// longer knows (it expired or was revoked).
var ErrLeaseGone = errors.New("lease expired or revoked")

// KeepAliveLease is a lease this process keeps alive for as long as it
// lives: keys put on it (Txn.PutLease, Store.PutLease) vanish when the
// process dies, TTL later at most. It survives a quorum loss shorter than
// its TTL (keep-alives resume, and a new etcd leader extends every lease);
// when etcd has not confirmed it for a whole TTL, or it expired or was
// revoked elsewhere, Lost is closed and the lease is no longer kept: the
// owner grants a new one and puts its keys again. After a long outage the
// old lease may still exist in etcd for up to a TTL (a new leader extends
// leases it inherits); keys put again on the new lease move to it.
type KeepAliveLease struct {
	s    *Store
	id   clientv3.LeaseID
	ttl  time.Duration
	stop context.CancelFunc
	lost chan struct{}

	revokeOnce sync.Once
}

// KeepAliveLease grants a lease of ttl (rounded up to the second; etcd's
// minimum is 1.5 election timeouts) and keeps it alive until Revoke, ctx
// ends or the Store is closed (Lost is closed then too). The grant is
// bounded by the request timeout (ErrUnavailable).
func (s *Store) KeepAliveLease(ctx context.Context, ttl time.Duration) (*KeepAliveLease, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("etcdstore: keep-alive lease: ttl %s: must be positive", ttl)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	rctx, done := s.request(ctx)
	resp, err := s.cli.Grant(rctx, secs)
	if err := done(err); err != nil {
		return nil, fmt.Errorf("etcdstore: keep-alive lease of %ds: %w", secs, err)
	}
	kctx, stop := context.WithCancel(ctx)
	ch, err := s.cli.KeepAlive(kctx, resp.ID)
	if err != nil {
		stop()
		s.revokeBestEffort(resp.ID)
		return nil, fmt.Errorf("etcdstore: keep-alive lease %x: %w", int64(resp.ID), err)
	}
	// Until the first keep-alive answer the client waits its dial
	// timeout + 1 s (6 s) before it gives up on the lease, whatever the
	// TTL: wait for that answer so that Lost means "not confirmed for a
	// TTL" from the start.
	first := time.NewTimer(s.requestTimeout)
	defer first.Stop()
	select {
	case _, ok := <-ch:
		if !ok {
			stop()
			return nil, fmt.Errorf("etcdstore: keep-alive lease %x: %w", int64(resp.ID), ErrLeaseGone)
		}
	case <-first.C:
		stop()
		s.revokeBestEffort(resp.ID)
		return nil, fmt.Errorf("etcdstore: keep-alive lease %x: %w", int64(resp.ID), &UnavailableError{Timeout: s.requestTimeout})
	}
	l := &KeepAliveLease{s: s, id: resp.ID, ttl: time.Duration(resp.TTL) * time.Second, stop: stop, lost: make(chan struct{})}
	go func() {
		// The client closes ch when etcd has not answered for a TTL, the
		// lease is gone, kctx ended or the client closed. Draining it
		// keeps the client's queue from filling.
		for range ch {
		}
		if kctx.Err() == nil { // not stopped by Revoke or ctx
			stop()
			select {
			case <-s.done: // the Store closed
			default:
				s.log.Warn("etcd lease lost: keys on it are no longer kept", "lease", fmt.Sprintf("%x", int64(l.id)), "ttl", l.ttl)
			}
		}
		close(l.lost)
	}()
	return l, nil
}

// ID is the etcd lease id.
func (l *KeepAliveLease) ID() clientv3.LeaseID { return l.id }

// TTL is the TTL etcd granted.
func (l *KeepAliveLease) TTL() time.Duration { return l.ttl }

// Lost is closed once the lease is no longer kept alive: etcd did not
// confirm it for a TTL (quorum lost that long), it expired or was revoked,
// or it was stopped (Revoke, ctx, Close).
func (l *KeepAliveLease) Lost() <-chan struct{} { return l.lost }

// Revoke stops the keep-alive and revokes the lease: its keys vanish at
// once. A lease etcd no longer knows is not an error. Bounded by the
// request timeout; when etcd cannot be reached the lease simply expires.
func (l *KeepAliveLease) Revoke(ctx context.Context) error {
	var err error
	l.revokeOnce.Do(func() {
		l.stop()
		rctx, done := l.s.request(ctx)
		_, rerr := l.s.cli.Revoke(rctx, l.id)
		if errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			rerr = nil
		}
		if rerr = done(rerr); rerr != nil {
			err = fmt.Errorf("etcdstore: revoke lease %x: %w", int64(l.id), rerr)
		}
	})
	<-l.lost
	return err
}

// revokeBestEffort revokes a lease nobody will keep.
func (s *Store) revokeBestEffort(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, id)
}

// PutLease stores v as JSON under key on l (see Txn.PutLease).
func (s *Store) PutLease(ctx context.Context, key string, v any, l *KeepAliveLease) error {
	if _, err := s.Txn().PutLease(key, v, l).Commit(ctx); err != nil {
		return fmt.Errorf("etcdstore: put %q: %w", key, err)
	}
	return nil
}
