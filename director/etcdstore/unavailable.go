package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultRequestTimeout is Options.RequestTimeout's default. etcd itself
// answers a write to a member without quorum only after ~7 s ("request
// timed out"), and a client whose endpoints are all down retries until its
// ctx ends: a request bounded here fails clearly in bounded time instead.
const DefaultRequestTimeout = 3 * time.Second

// ErrUnavailable is wrapped (as an *UnavailableError) by every request
// that etcd did not answer within Options.RequestTimeout, or refused for
// want of a leader: the cluster has lost quorum or cannot be reached. A
// write that failed so may still have been applied (it may commit once
// quorum is back): callers retry idempotently (IfAbsent, client ids).
var ErrUnavailable = errors.New("etcd unavailable")

// UnavailableError is a request etcd did not serve: Timeout is set when
// nothing answered within it (or a member gave up waiting for a quorum),
// Err is what etcd said, when it said something (a member without a
// leader).
type UnavailableError struct {
	Timeout time.Duration
	Err     error
}

func (e *UnavailableError) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("etcd: no answer within %s: cluster without quorum or unreachable", e.Timeout)
	}
	return fmt.Sprintf("etcd: cluster without quorum or unreachable: %v", e.Err)
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// errRequestTimeout is the cause of a request ctx that this package's own
// timeout ended (not the caller's).
var errRequestTimeout = errors.New("etcdstore: request timeout")

// request bounds one unary etcd call (or a few that make one operation:
// a lease grant and its put) by the request timeout, unless ctx already
// ends sooner. done maps the call's error: an expiry of our own timer, or
// a member without a leader, becomes an *UnavailableError; anything else,
// the caller's own deadline or cancel included, is returned as is.
func (s *Store) request(ctx context.Context) (rctx context.Context, done func(error) error) {
	d := s.requestTimeout
	start := time.Now()
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func(err error) error { return s.unavailable(ctx, ctx, start, err) }
	}
	rctx, cancel := context.WithTimeoutCause(ctx, d, errRequestTimeout)
	return rctx, func(err error) error {
		defer cancel()
		return s.unavailable(ctx, rctx, start, err)
	}
}

func (s *Store) unavailable(parent, rctx context.Context, start time.Time, err error) error {
	if err == nil {
		return nil
	}
	if parent.Err() == nil && errors.Is(context.Cause(rctx), errRequestTimeout) {
		return &UnavailableError{Timeout: s.requestTimeout}
	}
	// a member's own timeout (it gave up waiting for a quorum: ~7 s, or
	// as our timer fired) reads as ours, with the time it took: the same
	// condition, in the words callers and docs know
	if isAny(err, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrTimeoutWaitAppliedIndex) {
		took := time.Since(start).Round(100 * time.Millisecond)
		if took >= s.requestTimeout-100*time.Millisecond {
			took = min(took, s.requestTimeout)
		}
		return &UnavailableError{Timeout: max(took, 100*time.Millisecond), Err: err}
	}
	if isAny(err, rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged) || status.Code(err) == codes.Unavailable {
		return &UnavailableError{Err: err}
	}
	return err
}

func isAny(err error, targets ...error) bool {
	for _, e := range targets {
		if errors.Is(err, e) || rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(e) {
			return true
		}
	}
	return false
}
