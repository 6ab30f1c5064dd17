package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// electionPrefix is where elections live, under the Store's prefix.
const electionPrefix = "election/"

// Leadership is won by Campaign and held until Done is closed: the
// session's lease was lost (etcd unreachable or without quorum for a
// TTL), Resign was called, or Campaign's ctx ended. Work done as leader
// runs under a ctx that ends with Done; another candidate may win once the
// lease expires, so leader-only work must stay idempotent.
type Leadership struct {
	s        *Store
	name     string
	value    string
	session  *concurrency.Session
	election *concurrency.Election
	done     chan struct{}
	stop     context.CancelFunc
	once     sync.Once
}

// Campaign blocks until this candidate (value: a replica id) leads the
// election name, or ctx ends. The candidacy lives on a lease of ttl kept
// alive by this process: when the process dies, another candidate takes
// over within ttl (plus etcd's election when a member died too).
func (s *Store) Campaign(ctx context.Context, name, value string, ttl time.Duration) (*Leadership, error) {
	if name == "" {
		return nil, errors.New("etcdstore: campaign: empty election name")
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	if secs <= 0 {
		return nil, fmt.Errorf("etcdstore: campaign %q: ttl %s: must be positive", name, ttl)
	}
	// The grant is bounded like any request; the session's keep-alive
	// then lives with sctx (the leadership), not with the request.
	rctx, done := s.request(ctx)
	resp, err := s.cli.Grant(rctx, secs)
	if err := done(err); err != nil {
		return nil, fmt.Errorf("etcdstore: campaign %q: session lease: %w", name, err)
	}
	sctx, stop := context.WithCancel(ctx)
	session, err := concurrency.NewSession(s.cli, concurrency.WithLease(resp.ID), concurrency.WithContext(sctx), concurrency.WithTTL(int(secs)))
	if err != nil {
		stop()
		s.revokeBestEffort(resp.ID)
		return nil, fmt.Errorf("etcdstore: campaign %q: session: %w", name, err)
	}
	l := &Leadership{s: s, name: name, value: value, session: session, stop: stop, done: make(chan struct{}),
		election: concurrency.NewElection(session, s.prefix+electionPrefix+name)}
	// A session lost while waiting must end the wait: Campaign could
	// otherwise report a win on a lease that is already gone.
	cctx, cancel := context.WithCancel(sctx)
	defer cancel()
	go func() {
		select {
		case <-session.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := l.election.Campaign(cctx, value); err != nil {
		l.end()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("etcdstore: campaign %q: %w", name, ctx.Err())
		}
		select {
		case <-session.Done():
			return nil, fmt.Errorf("etcdstore: campaign %q: session lease lost while waiting: %w", name, ErrLeaseGone)
		default:
		}
		return nil, fmt.Errorf("etcdstore: campaign %q: %w", name, err)
	}
	select {
	case <-session.Done():
		l.end()
		return nil, fmt.Errorf("etcdstore: campaign %q: session lease lost while waiting: %w", name, ErrLeaseGone)
	default:
	}
	go func() {
		<-session.Done()
		l.once.Do(func() { close(l.done) })
	}()
	s.log.Info("etcd election won", "election", name, "value", value)
	return l, nil
}

// Done is closed when the leadership ends.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Context is a ctx that ends with the leadership.
func (l *Leadership) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Resign gives the leadership up at once (the next candidate takes over
// without waiting for a TTL) and ends it. Bounded by the request timeout.
func (l *Leadership) Resign(ctx context.Context) error {
	rctx, done := l.s.request(ctx)
	err := done(l.election.Resign(rctx))
	l.end()
	if err != nil {
		return fmt.Errorf("etcdstore: resign %q: %w", l.name, err)
	}
	return nil
}

// end revokes the session's lease (best effort, bounded: without quorum
// it expires by itself), stops its keep-alive and closes Done.
func (l *Leadership) end() {
	l.s.revokeBestEffort(l.session.Lease())
	l.stop()
	l.once.Do(func() { close(l.done) })
}

// Leader is the value of the current leader of election name; "" when
// nobody leads. Bounded by the request timeout.
func (s *Store) Leader(ctx context.Context, name string) (string, error) {
	rctx, done := s.request(ctx)
	resp, err := s.cli.Get(rctx, s.prefix+electionPrefix+name+"/", clientv3.WithFirstCreate()...)
	if err := done(err); err != nil {
		return "", fmt.Errorf("etcdstore: leader of %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}
