package director

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Node states (NodeInfo.state). Revoked comes from the node's record; the
// others from the tracker.
const (
	StateReady    = "Ready"
	StateDegraded = "Degraded"
	StateOffline  = "Offline"
	StateRevoked  = "Revoked"
)

// tracker judges liveness from when the director last heard from each
// node, on the director's own clock (never an agent's): Ready, Degraded
// after degraded of silence, Offline after offline. It lives in memory:
// a heartbeat writes nothing anywhere.
type tracker struct {
	now               func() time.Time
	degraded, offline time.Duration

	mu    sync.Mutex
	nodes map[string]*liveness
}

type liveness struct {
	seen  time.Time // last heard, or when tracking began
	heard bool      // heard from since this director started
	state string    // the state last reported by sweep
	since time.Time // when state began
}

// transition is a change of state found by sweep.
type transition struct {
	Node     string
	From, To string
	Since    time.Time
	LastSeen time.Time
}

func newTracker(now func() time.Time, degraded, offline time.Duration) *tracker {
	return &tracker{now: now, degraded: degraded, offline: offline, nodes: map[string]*liveness{}}
}

// add starts tracking a node as last seen at t (Offline from t when
// offline is set), unless it is tracked already.
func (t *tracker) add(node string, at time.Time, offline bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.nodes[node]; ok {
		return
	}
	l := &liveness{seen: at, state: StateReady, since: at}
	if offline {
		l.seen = at.Add(-t.offline)
		l.state = StateOffline
	}
	t.nodes[node] = l
}

func (t *tracker) remove(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.nodes, node)
}

// seen records that the node was heard from now, and returns the
// transition to Ready if it was not Ready. A node not tracked is ignored:
// nodes are added by enrolment, the load at Open and the nodes/ watch,
// and removed when revoked or forgotten; a session's last heartbeat
// after that must not bring one back.
func (t *tracker) seen(node string) *transition {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.nodes[node]
	if !ok {
		return nil
	}
	l.seen, l.heard = now, true
	if l.state == StateReady {
		return nil
	}
	tr := &transition{Node: node, From: l.state, To: StateReady, Since: now, LastSeen: now}
	l.state, l.since = StateReady, now
	return tr
}

// stateAt is what silence since seen means at now.
func (t *tracker) stateAt(seen, now time.Time) string {
	switch silent := now.Sub(seen); {
	case silent >= t.offline:
		return StateOffline
	case silent >= t.degraded:
		return StateDegraded
	}
	return StateReady
}

// nodeLiveness is a node's state now (computed, not only as of the last
// sweep), when it was last heard (zero: not since this director started)
// and since when its state holds. ok is false for an untracked node.
type nodeLiveness struct {
	State    string
	LastSeen time.Time
	Since    time.Time
}

func (t *tracker) get(node string) (nodeLiveness, bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.nodes[node]
	if !ok {
		return nodeLiveness{}, false
	}
	nl := nodeLiveness{State: t.stateAt(l.seen, now), Since: l.since}
	if l.heard {
		nl.LastSeen = l.seen
	}
	if nl.State != l.state {
		nl.Since = t.changedAt(l, nl.State)
	}
	return nl, true
}

// changedAt is when silence turned the node into state.
func (t *tracker) changedAt(l *liveness, state string) time.Time {
	switch state {
	case StateOffline:
		return l.seen.Add(t.offline)
	case StateDegraded:
		return l.seen.Add(t.degraded)
	}
	return l.seen
}

// hand records that another replica holds the node's session (or held
// it until it was last seen at seen): Ready from then, without a
// transition to write (the holder writes its own).
func (t *tracker) hand(node string, seen time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.nodes[node]
	if !ok {
		return
	}
	if seen.After(l.seen) || l.state != StateReady {
		l.seen = seen
	}
	l.heard = true
	if l.state != StateReady {
		l.state, l.since = StateReady, seen
	}
}

// sweep finds the transitions since the last sweep, in node order. A node
// silent long enough goes straight from Ready to Offline.
func (t *tracker) sweep() []transition { return t.sweepOwned(nil) }

// sweepOwned is sweep over the nodes judge says this replica judges
// (all when judge is nil); the others keep their state.
func (t *tracker) sweepOwned(judge func(node string) bool) []transition {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []transition
	for node, l := range t.nodes {
		if judge != nil && !judge(node) {
			continue
		}
		s := t.stateAt(l.seen, now)
		if s == l.state {
			continue
		}
		since := t.changedAt(l, s)
		out = append(out, transition{Node: node, From: l.state, To: s, Since: since, LastSeen: l.seen})
		l.state, l.since = s, since
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// sweepLoop writes liveness transitions to nodestate/<node>, cuts
// sessions whose certificate expired and forgets ended enrolment failure
// windows, every SweepEvery.
func (d *Director) sweepLoop(ctx context.Context) {
	tick := time.NewTicker(d.opts.SweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Only the nodes this replica judges: those it holds, and the
		// free ones when it leads (see judge).
		d.retryTransitions(ctx)
		for _, tr := range d.live.sweepOwned(d.judge()) {
			d.recordTransition(ctx, tr)
		}
		d.cutExpired()
		d.enrollFails.prune(d.now())
	}
}

// recordTransition logs a change of state and writes it to the store:
// the only liveness write there is.
func (d *Director) recordTransition(ctx context.Context, tr transition) {
	d.log.Info("node state", "node", tr.Node, "from", tr.From, "to", tr.To,
		"lastSeen", tr.LastSeen.UTC().Format(time.RFC3339))
	rec := nodeStateRecord{V: recordVersion, State: tr.To, Since: ms(tr.Since), LastSeen: ms(tr.LastSeen)}
	if err := d.store.Put(ctx, preNodeState+tr.Node, rec, 0); err != nil {
		if ctx.Err() == nil {
			d.log.Warn("director: write node state: retried at the next sweep", "node", tr.Node, "err", err)
			d.transitionFailed(tr)
		}
		return
	}
	d.transitionWritten(tr.Node)
}

// cutExpired ends the sessions whose certificate has expired by the
// director's clock.
func (d *Director) cutExpired() {
	now := d.now()
	var cut []*liveSession
	d.mu.Lock()
	for _, s := range d.sessions {
		if now.After(s.notAfter) {
			cut = append(cut, s)
		}
	}
	d.mu.Unlock()
	for _, s := range cut {
		s.cut(errCertExpired, "certificate expired")
	}
}
