package director

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// Limits on failed enrolments from one source address: the first
// enrollFailLimit failures in a window of enrollFailWindow are audited
// one by one; the one that reaches the limit adds a single "rate limit"
// entry, and every Enroll from that source is then refused, unaudited
// and before any hashing or store access, until the window ends. Without
// this anyone who can reach the port could fill etcd's quota with audit
// entries kept for 30 days. Successes are never counted.
const (
	enrollFailLimit  = 20
	enrollFailWindow = time.Minute
)

// failLimiter counts failed enrolments per source, in memory.
type failLimiter struct {
	mu sync.Mutex
	m  map[string]*failWindow
}

type failWindow struct {
	start time.Time
	n     int // failures in the window
}

func (w *failWindow) end() time.Time { return w.start.Add(enrollFailWindow) }

// refused says whether src is refused at now, and until when.
func (l *failLimiter) refused(src string, now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.m[src]
	if w == nil || !now.Before(w.end()) || w.n < enrollFailLimit {
		return time.Time{}, false
	}
	return w.end(), true
}

// fail counts one failure of src at now. audit says whether it is to be
// audited (one of the first enrollFailLimit of its window: concurrent
// failures past the limit are not); limited that it is the one that
// reached the limit, refused from now until until.
func (l *failLimiter) fail(src string, now time.Time) (audit, limited bool, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*failWindow{}
	}
	w := l.m[src]
	if w == nil || !now.Before(w.end()) {
		w = &failWindow{start: now}
		l.m[src] = w
	}
	w.n++
	return w.n <= enrollFailLimit, w.n == enrollFailLimit, w.end()
}

// prune drops the windows that ended by now.
func (l *failLimiter) prune(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for src, w := range l.m {
		if !now.Before(w.end()) {
			delete(l.m, src)
		}
	}
}

// enrollRateLimited is the answer to a source refused for its failures.
func (d *Director) enrollRateLimited(src string, until time.Time) error {
	d.log.Debug("enroll refused: too many failures from this source", "source", src,
		"until", until.UTC().Format(time.RFC3339))
	return connect.NewError(connect.CodeResourceExhausted,
		fmt.Errorf("too many failed enrolments from %s: try again after %s", src, until.UTC().Format(time.RFC3339)))
}

// enrollFailed audits a failed enrolment (e is its token.fail or
// enroll.replay entry) unless its source is past the limit; the failure
// that reaches the limit also writes the one entry saying so.
func (d *Director) enrollFailed(ctx context.Context, src string, e auditRecord) {
	audit, limited, until := d.enrollFails.fail(src, d.now())
	if !audit {
		d.log.Debug("enroll failed: not audited (rate limit)", "source", src, "kind", e.Kind)
		return
	}
	d.audit(ctx, e)
	if limited {
		d.audit(ctx, auditRecord{Kind: "token.fail", Source: src,
			Detail: fmt.Sprintf("rate limit: further attempts from %s refused until %s", src, until.UTC().Format(time.RFC3339))})
	}
}
