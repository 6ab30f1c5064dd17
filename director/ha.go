package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director/etcdstore"
)

// HA: several replicas over one etcd. Each replica keeps a lease of its
// own (replicaTTL) with replicas/<id> on it and, for every agent session
// it holds, sessions/<node>. A node's session is where its tasks go and
// who judges its liveness; the elected leader ("singletons") judges the
// nodes nobody holds.
const (
	preReplicas = "replicas/"
	preSessions = "sessions/"

	// replicaTTL is the replica lease's TTL: a replica that died without
	// closing leaves its keys (and its nodes held) that long at most.
	replicaTTL = 10 * time.Second
	// electionSingletons is the election of the leader, which runs the
	// singleton loops.
	electionSingletons = "singletons"
	// electionTTL is the leader's campaign lease TTL.
	electionTTL = 5 * time.Second
	// reclaimEvery is how often the held sessions' keys are checked
	// against the store (put again when missing: after a lease loss or a
	// failed write).
	reclaimEvery = 2 * time.Second
)

// directorsDebounce is how long a change of the replica set waits for
// more before the new addresses are pushed to the sessions.
var directorsDebounce = 2 * time.Second

// replicaRecord is replicas/<id>, on the replica's lease.
type replicaRecord struct {
	V         int    `json:"v"`
	ID        string `json:"id"`
	Advertise string `json:"advertise"`
	Version   string `json:"version"`
	StartedAt int64  `json:"startedAt"`
}

// sessionRecord is sessions/<node>, on the holding replica's lease.
type sessionRecord struct {
	V        int    `json:"v"`
	Replica  string `json:"replica"`
	Serial   string `json:"serial"`
	OpenedAt int64  `json:"openedAt"`
	Addr     string `json:"addr"`
}

// sessionOwner is what sessions/<node> says, as last seen by the watch.
type sessionOwner struct {
	replica string
	rev     int64
}

// sessionClaim is a sessions/<node> key this replica wrote for one of
// its sessions: rev is the key's ModRevision then, lease the lease.
type sessionClaim struct {
	s     *liveSession
	rev   int64
	lease int64
}

// haState is the director's HA state in memory.
type haState struct {
	mu         sync.Mutex
	lease      *etcdstore.KeepAliveLease
	replicas   map[string]replicaRecord // id → record (this one included once put)
	owners     map[string]sessionOwner  // node → sessions/ key (any replica)
	claims     map[string]sessionClaim  // node → this replica's key
	leader     bool
	leaderCh   chan struct{}              // closed at every change of leader (then replaced)
	states     map[string]nodeStateRecord // nodestate/: remote nodes' state as their holder wrote it
	dirty      map[string]transition      // liveness writes that failed: retried
	dirsChange chan struct{}              // the replica set changed (cap 1)
}

// haInit makes the HA state's maps (Open, before anything runs).
func (d *Director) haInit() {
	d.ha.leaderCh = make(chan struct{})
	d.ha.replicas = map[string]replicaRecord{}
	d.ha.owners = map[string]sessionOwner{}
	d.ha.claims = map[string]sessionClaim{}
	d.ha.dirty = map[string]transition{}
	d.ha.states = map[string]nodeStateRecord{}
	d.ha.dirsChange = make(chan struct{}, 1)
}

// startHA grants the replica lease, puts replicas/<id>, loads replicas/
// and sessions/ and starts their watches, the lease keeper, the election
// and the Directors push.
func (d *Director) startHA(ctx context.Context) error {
	if err := d.grantReplica(ctx); err != nil {
		return err
	}
	rrev, err := d.listReplicas(ctx)
	if err != nil {
		return err
	}
	srev, err := d.listSessions(ctx)
	if err != nil {
		return err
	}
	nrev, err := d.listNodeStates(ctx)
	if err != nil {
		return err
	}
	loops := []func(context.Context){
		func(ctx context.Context) { d.followReplicas(ctx, rrev) },
		func(ctx context.Context) { d.followNodeStates(ctx, nrev) },
		func(ctx context.Context) { d.followSessions(ctx, srev) },
		d.leaseLoop,
		d.campaignLoop,
		func(ctx context.Context) { d.whileLeader(ctx, d.tokenSweepLoop) },
		d.directorsLoop,
	}
	d.wg.Add(len(loops))
	for _, f := range loops {
		go func() {
			defer d.wg.Done()
			f(d.bg)
		}()
	}
	return nil
}

// stopHA (Close, after the loops ended) revokes the replica lease: its
// replicas/ and sessions/ keys vanish at once, and the other replicas
// take the nodes over without waiting for a TTL.
func (d *Director) stopHA() {
	d.ha.mu.Lock()
	l := d.ha.lease
	d.ha.lease = nil
	d.ha.mu.Unlock()
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := l.Revoke(ctx); err != nil {
		d.log.Warn("director: revoke the replica lease (it expires by itself)", "err", err, "ttl", l.TTL())
	}
}

// grantReplica grants a new replica lease and puts replicas/<id> on it.
func (d *Director) grantReplica(ctx context.Context) error {
	l, err := d.store.KeepAliveLease(d.bg, replicaTTL)
	if err != nil {
		return fmt.Errorf("director: replica lease: %w", err)
	}
	rec := replicaRecord{V: recordVersion, ID: d.replicaID, Advertise: d.advertise, Version: d.version, StartedAt: ms(d.startedAt)}
	if err := d.store.PutLease(ctx, preReplicas+d.replicaID, rec, l); err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = l.Revoke(rctx)
		return fmt.Errorf("director: register replica %s: %w", d.replicaID, err)
	}
	d.ha.mu.Lock()
	d.ha.lease = l
	d.ha.mu.Unlock()
	return nil
}

// leaseLoop grants a new lease when the replica's is lost (etcd did not
// confirm it for a TTL): replicas/<id> is put again at once, the held
// sessions' keys by the next reclaim. Streams are not cut.
func (d *Director) leaseLoop(ctx context.Context) {
	tick := time.NewTicker(reclaimEvery)
	defer tick.Stop()
	for {
		d.ha.mu.Lock()
		l := d.ha.lease
		d.ha.mu.Unlock()
		var lost <-chan struct{}
		if l != nil {
			lost = l.Lost()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			d.reclaimSessions(ctx)
			continue
		case <-lost:
		}
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("director: replica lease lost: granting a new one", "replica", d.replicaID)
		for ctx.Err() == nil {
			err := d.grantReplica(ctx)
			if err == nil {
				d.log.Info("director: replica lease granted again", "replica", d.replicaID)
				break
			}
			d.log.Warn("director: replica lease", "err", err)
			sleepCtx(ctx, time.Second)
		}
		d.reclaimSessions(ctx)
	}
}

// leaseID is the current replica lease's id, 0 when none.
func (d *Director) leaseID() (int64, *etcdstore.KeepAliveLease) {
	d.ha.mu.Lock()
	defer d.ha.mu.Unlock()
	if d.ha.lease == nil {
		return 0, nil
	}
	return int64(d.ha.lease.ID()), d.ha.lease
}

func (d *Director) sessionRecord(s *liveSession) sessionRecord {
	return sessionRecord{V: recordVersion, Replica: d.replicaID, Serial: s.serial, OpenedAt: ms(s.opened), Addr: s.addr}
}

// claimSession puts sessions/<node> for a session that just registered
// here, over whatever another replica left there: that replica's watch
// then ends its stream for the node.
func (d *Director) claimSession(ctx context.Context, s *liveSession) error {
	id, l := d.leaseID()
	if l == nil {
		return errors.New("director: no replica lease (etcd unreachable?)")
	}
	_, rev, err := d.store.Txn().PutLease(preSessions+s.node, d.sessionRecord(s), l).CommitRev(ctx)
	if err != nil {
		return fmt.Errorf("director: record the session of node %s: %w", s.node, err)
	}
	d.ha.mu.Lock()
	d.ha.claims[s.node] = sessionClaim{s: s, rev: rev, lease: id}
	st, had := d.ha.states[s.node]
	d.ha.mu.Unlock()
	if had && st.State != StateReady {
		// Written by the leader while the node was free (or by its
		// last holder): this replica's tracker may think it Ready
		// already and write no transition, while the others show
		// what the store says.
		now := d.now()
		d.recordTransition(ctx, transition{Node: s.node, From: st.State, To: StateReady, Since: now, LastSeen: now})
	}
	return nil
}

// releaseSession deletes sessions/<node> when a session here ends, if
// the key is still this session's.
func (d *Director) releaseSession(s *liveSession) {
	d.ha.mu.Lock()
	c, ok := d.ha.claims[s.node]
	if ok && c.s == s {
		delete(d.ha.claims, s.node)
	}
	d.ha.mu.Unlock()
	if !ok || c.s != s {
		return
	}
	ctx, cancel := context.WithTimeout(d.bg, 2*time.Second)
	defer cancel()
	key := preSessions + s.node
	if _, err := d.store.Txn().IfRev(key, c.rev).Delete(key).Commit(ctx); err != nil && d.bg.Err() == nil {
		// Left to the lease: the other replicas see the node as held
		// here until the next reclaim (which removes no key) or the
		// lease ends.
		d.log.Warn("director: delete the session key", "node", s.node, "err", err)
	}
}

// reclaimSessions puts sessions/<node> again for every held session
// whose key is missing or on an old lease (after a lease loss or a
// failed write), and ends a held session whose node another replica
// claimed later (the watch's event may have raced its registration).
func (d *Director) reclaimSessions(ctx context.Context) {
	id, l := d.leaseID()
	d.mu.Lock()
	held := make([]*liveSession, 0, len(d.sessions))
	for _, s := range d.sessions {
		held = append(held, s)
	}
	d.mu.Unlock()
	type reclaim struct {
		s      *liveSession
		expect int64 // the key's ModRevision now, 0: absent
	}
	var todo []reclaim
	for _, s := range held {
		select {
		case <-s.ended:
			continue
		default:
		}
		d.ha.mu.Lock()
		c, claimed := d.ha.claims[s.node]
		o, owned := d.ha.owners[s.node]
		d.ha.mu.Unlock()
		if claimed && c.s != s {
			continue // a newer session of the node here
		}
		if owned && o.replica != d.replicaID && (!claimed || o.rev > c.rev) {
			s.cut(nil, "moved to replica "+o.replica)
			continue
		}
		if claimed && owned && o.rev == c.rev && c.lease == id {
			continue // as it should be
		}
		if l == nil {
			return
		}
		// Only where the key is absent or ours: never over a newer
		// claim of another replica.
		var expect int64
		if owned {
			if o.replica != d.replicaID {
				continue
			}
			expect = o.rev
		}
		todo = append(todo, reclaim{s, expect})
	}
	// After a lease loss every held session is here: reclaimBatch keys
	// to a transaction (etcd allows 128 operations), one at a time for a
	// batch whose condition failed.
	for len(todo) > 0 {
		batch := todo[:min(len(todo), reclaimBatch)]
		todo = todo[len(batch):]
		if len(batch) > 1 {
			txn := d.store.Txn()
			for _, r := range batch {
				txn.IfRev(preSessions+r.s.node, r.expect)
			}
			for _, r := range batch {
				txn.PutLease(preSessions+r.s.node, d.sessionRecord(r.s), l)
			}
			ok, rev, err := txn.CommitRev(ctx)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Warn("director: record the sessions again", "sessions", len(batch), "err", err)
				}
				return // etcd away: the next round
			}
			if ok {
				for _, r := range batch {
					d.reclaimed(r.s, rev, id)
				}
				continue
			}
		}
		for _, r := range batch {
			key := preSessions + r.s.node
			ok, rev, err := d.store.Txn().IfRev(key, r.expect).PutLease(key, d.sessionRecord(r.s), l).CommitRev(ctx)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Warn("director: record the session again", "node", r.s.node, "err", err)
				}
				return
			}
			if ok {
				d.reclaimed(r.s, rev, id)
			}
		}
	}
}

// reclaimBatch is how many sessions' keys one reclaim transaction puts
// (a condition and a put each).
const reclaimBatch = 50

// reclaimed records a session key put again at rev on lease id.
func (d *Director) reclaimed(s *liveSession, rev, id int64) {
	d.ha.mu.Lock()
	defer d.ha.mu.Unlock()
	if cur, ok := d.ha.claims[s.node]; !ok || cur.s == s {
		d.ha.claims[s.node] = sessionClaim{s: s, rev: rev, lease: id}
	}
}

// listSessions loads sessions/ into memory.
func (d *Director) listSessions(ctx context.Context) (int64, error) {
	owners := map[string]sessionOwner{}
	rev, err := d.store.ListRev(ctx, preSessions, func(key string, rev int64, raw []byte) error {
		var r sessionRecord
		if json.Unmarshal(raw, &r) != nil {
			return nil
		}
		owners[strings.TrimPrefix(key, preSessions)] = sessionOwner{replica: r.Replica, rev: rev}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("director: load sessions: %w", err)
	}
	d.ha.mu.Lock()
	d.ha.owners = owners
	d.ha.mu.Unlock()
	now := d.now()
	for node, o := range owners {
		if o.replica != d.replicaID {
			d.live.hand(node, now)
		}
	}
	return rev, nil
}

// followSessions keeps sessions/ in memory. A node that another replica
// claimed after this one is no longer held here: its local stream ends
// ("moved to replica X"). A node whose key vanished is free: last seen
// a lease TTL ago at best (its replica may have died), judged by the
// leader from then on.
func (d *Director) followSessions(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range d.store.Watch(ctx, preSessions, rev+1) {
			if ev.Status() {
				continue
			}
			rev = ev.Rev
			node := strings.TrimPrefix(ev.Key, preSessions)
			if ev.Deleted {
				d.ha.mu.Lock()
				o, had := d.ha.owners[node]
				_, holderLive := d.ha.replicas[o.replica]
				d.ha.mu.Unlock()
				if had && o.replica != d.replicaID && d.held(node) == nil {
					// Its holder closed the session now, or died and
					// the key went with its lease, a TTL after it was
					// last heard (the replica's key goes with it: it
					// may be seen a moment later). Recorded before the
					// node stops showing as held elsewhere, so that
					// whoever sees it free sees when it was last heard.
					seen := d.now()
					if !holderLive {
						seen = seen.Add(-replicaTTL)
					}
					d.live.hand(node, seen)
				}
				d.ha.mu.Lock()
				if o, had := d.ha.owners[node]; had && o.rev <= ev.Rev {
					delete(d.ha.owners, node)
				}
				d.ha.mu.Unlock()
				continue
			}
			var r sessionRecord
			if err := json.Unmarshal(ev.Raw, &r); err != nil {
				d.log.Warn("director: unreadable session record: ignored", "key", ev.Key, "err", err)
				continue
			}
			d.ha.mu.Lock()
			d.ha.owners[node] = sessionOwner{replica: r.Replica, rev: ev.Rev}
			c, claimed := d.ha.claims[node]
			moved := r.Replica != d.replicaID && claimed && ev.Rev > c.rev
			if moved {
				delete(d.ha.claims, node)
			}
			d.ha.mu.Unlock()
			if r.Replica == d.replicaID {
				continue
			}
			d.live.hand(node, d.now())
			if moved {
				d.log.Info("session moved to another replica", "node", node, "replica", r.Replica)
				c.s.cut(nil, "moved to replica "+r.Replica)
			}
		}
		if ctx.Err() != nil {
			return
		}
		for ctx.Err() == nil {
			var err error
			if rev, err = d.listSessions(ctx); err == nil {
				break
			}
			d.log.Error("director: list sessions", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

// listReplicas loads replicas/ into memory.
func (d *Director) listReplicas(ctx context.Context) (int64, error) {
	reps := map[string]replicaRecord{}
	rev, err := d.store.ListRev(ctx, preReplicas, func(key string, _ int64, raw []byte) error {
		var r replicaRecord
		if json.Unmarshal(raw, &r) == nil && r.ID != "" {
			reps[r.ID] = r
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("director: load replicas: %w", err)
	}
	d.ha.mu.Lock()
	changed := !sameAddrs(d.ha.replicas, reps)
	d.ha.replicas = reps
	d.ha.mu.Unlock()
	if changed {
		d.directorsChanged()
	}
	return rev, nil
}

// followReplicas keeps replicas/ in memory; a change of the addresses is
// pushed to the sessions (Directors).
func (d *Director) followReplicas(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range d.store.Watch(ctx, preReplicas, rev+1) {
			if ev.Status() {
				continue
			}
			rev = ev.Rev
			id := strings.TrimPrefix(ev.Key, preReplicas)
			d.ha.mu.Lock()
			before := d.ha.replicas[id].Advertise
			if ev.Deleted {
				delete(d.ha.replicas, id)
			} else {
				var r replicaRecord
				if json.Unmarshal(ev.Raw, &r) == nil && r.ID == id {
					d.ha.replicas[id] = r
				}
			}
			after := d.ha.replicas[id].Advertise
			d.ha.mu.Unlock()
			if before != after {
				d.log.Info("director replicas changed", "replica", id, "advertise", after, "was", before)
				d.directorsChanged()
			}
		}
		if ctx.Err() != nil {
			return
		}
		for ctx.Err() == nil {
			var err error
			if rev, err = d.listReplicas(ctx); err == nil {
				break
			}
			d.log.Error("director: list replicas", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

func sameAddrs(a, b map[string]replicaRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for id, r := range a {
		if b[id].Advertise != r.Advertise {
			return false
		}
	}
	return true
}

func (d *Director) directorsChanged() {
	select {
	case d.ha.dirsChange <- struct{}{}:
	default:
	}
}

// directorAddrs are the live replicas' advertised addresses, this one
// first: what agents are told in Registered, EnrollResponse and
// Directors.
func (d *Director) directorAddrs() []string {
	d.ha.mu.Lock()
	others := make([]string, 0, len(d.ha.replicas))
	for id, r := range d.ha.replicas {
		if id != d.replicaID && r.Advertise != "" && r.Advertise != d.advertise {
			others = append(others, r.Advertise)
		}
	}
	d.ha.mu.Unlock()
	slices.Sort(others)
	return append([]string{d.advertise}, slices.Compact(others)...)
}

// otherReplicas says whether another replica is live (a session told
// Goodbye may then come back at once, to it).
func (d *Director) otherReplicas() bool {
	d.ha.mu.Lock()
	defer d.ha.mu.Unlock()
	for id := range d.ha.replicas {
		if id != d.replicaID {
			return true
		}
	}
	return false
}

// directorsLoop pushes Directors to every held session once the replica
// set has settled for directorsDebounce after a change. (Always: a
// session registered meanwhile may have been told another list.)
func (d *Director) directorsLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.ha.dirsChange:
		}
		t := time.NewTimer(directorsDebounce)
		for settled := false; !settled; {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-d.ha.dirsChange:
				t.Reset(directorsDebounce)
			case <-t.C:
				settled = true
			}
		}
		addrs := d.directorAddrs()
		d.mu.Lock()
		held := make([]*liveSession, 0, len(d.sessions))
		for _, s := range d.sessions {
			held = append(held, s)
		}
		d.mu.Unlock()
		for _, s := range held {
			s.enqueue(&directorv1.SessionResponse{Msg: &directorv1.SessionResponse_Directors{
				Directors: &directorv1.Directors{Addrs: addrs}}})
		}
		if len(held) > 0 {
			d.log.Info("director addresses pushed to sessions", "addrs", strings.Join(addrs, ","), "sessions", len(held))
		}
	}
}

// campaignLoop campaigns for the singletons' leadership for as long as
// the director runs, and resigns at Close.
func (d *Director) campaignLoop(ctx context.Context) {
	for ctx.Err() == nil {
		l, err := d.store.Campaign(ctx, electionSingletons, d.replicaID, electionTTL)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Warn("director: campaign for leadership", "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		d.setLeader(true)
		d.log.Info("director leads the singletons", "replica", d.replicaID)
		select {
		case <-ctx.Done():
			d.setLeader(false)
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = l.Resign(rctx)
			cancel()
			return
		case <-l.Done():
			d.setLeader(false)
			d.log.Warn("director: leadership lost: campaigning again", "replica", d.replicaID)
		}
	}
}

func (d *Director) setLeader(v bool) {
	d.ha.mu.Lock()
	defer d.ha.mu.Unlock()
	if d.ha.leader == v {
		return
	}
	d.ha.leader = v
	close(d.ha.leaderCh)
	d.ha.leaderCh = make(chan struct{})
}

// whileLeader runs f each time this replica becomes the leader, with a
// ctx that ends when the leadership does (or ctx), until ctx ends: the
// singleton loops (the task sweeper) run on one replica at a time.
func (d *Director) whileLeader(ctx context.Context, f func(context.Context)) {
	for ctx.Err() == nil {
		d.ha.mu.Lock()
		leader, changed := d.ha.leader, d.ha.leaderCh
		d.ha.mu.Unlock()
		if !leader {
			select {
			case <-ctx.Done():
			case <-changed:
			}
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-lctx.Done():
			}
		}()
		f(lctx)
		cancel()
		select { // f may have returned early: wait for the next change
		case <-ctx.Done():
		case <-changed:
		}
	}
}

// isLeader says whether this replica leads the singletons now.
func (d *Director) isLeader() bool {
	d.ha.mu.Lock()
	defer d.ha.mu.Unlock()
	return d.ha.leader
}

// listNodeStates loads nodestate/ into memory.
func (d *Director) listNodeStates(ctx context.Context) (int64, error) {
	states := map[string]nodeStateRecord{}
	rev, err := d.store.ListRev(ctx, preNodeState, func(key string, _ int64, raw []byte) error {
		var r nodeStateRecord
		if json.Unmarshal(raw, &r) == nil {
			states[strings.TrimPrefix(key, preNodeState)] = r
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("director: load node states: %w", err)
	}
	d.ha.mu.Lock()
	d.ha.states = states
	d.ha.mu.Unlock()
	return rev, nil
}

// followNodeStates keeps nodestate/ in memory: a node another replica
// holds shows the state its holder judged.
func (d *Director) followNodeStates(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range d.store.Watch(ctx, preNodeState, rev+1) {
			if ev.Status() {
				continue
			}
			rev = ev.Rev
			node := strings.TrimPrefix(ev.Key, preNodeState)
			var r nodeStateRecord
			d.ha.mu.Lock()
			if ev.Deleted {
				delete(d.ha.states, node)
			} else if json.Unmarshal(ev.Raw, &r) == nil {
				d.ha.states[node] = r
			}
			d.ha.mu.Unlock()
		}
		if ctx.Err() != nil {
			return
		}
		for ctx.Err() == nil {
			var err error
			if rev, err = d.listNodeStates(ctx); err == nil {
				break
			}
			d.log.Error("director: list node states", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

// remoteState is the state the holder of a node held elsewhere wrote
// (Ready when it wrote none).
func (d *Director) remoteState(node string) nodeStateRecord {
	d.ha.mu.Lock()
	defer d.ha.mu.Unlock()
	if r, ok := d.ha.states[node]; ok && r.State != "" {
		return r
	}
	return nodeStateRecord{State: StateReady}
}

// remoteHolder is the replica holding node's session when it is another
// one, "" otherwise.
func (d *Director) remoteHolder(node string) string {
	if d.held(node) != nil {
		return ""
	}
	d.ha.mu.Lock()
	defer d.ha.mu.Unlock()
	if o, ok := d.ha.owners[node]; ok && o.replica != d.replicaID {
		return o.replica
	}
	return ""
}

// judge is who this replica judges the liveness of, as of now: the
// nodes it holds; the free ones (no session anywhere) when it leads;
// never a node another replica holds.
func (d *Director) judge() func(node string) bool {
	d.mu.Lock()
	held := make(map[string]bool, len(d.sessions))
	for n := range d.sessions {
		held[n] = true
	}
	d.mu.Unlock()
	d.ha.mu.Lock()
	leader := d.ha.leader
	remote := map[string]bool{}
	for n, o := range d.ha.owners {
		if o.replica != d.replicaID {
			remote[n] = true
		}
	}
	d.ha.mu.Unlock()
	return func(node string) bool {
		switch {
		case held[node]:
			return true
		case remote[node]:
			return false
		}
		return leader
	}
}

// transitionFailed keeps a liveness write that failed (etcd without
// quorum) for the next sweep.
func (d *Director) transitionFailed(tr transition) {
	d.ha.mu.Lock()
	if d.ha.dirty != nil {
		d.ha.dirty[tr.Node] = tr
	}
	d.ha.mu.Unlock()
}

// retryTransitions writes again the transitions that failed, when the
// node's state is still theirs.
func (d *Director) retryTransitions(ctx context.Context) {
	d.ha.mu.Lock()
	todo := make([]transition, 0, len(d.ha.dirty))
	for _, tr := range d.ha.dirty {
		todo = append(todo, tr)
	}
	d.ha.mu.Unlock()
	for _, tr := range todo {
		d.ha.mu.Lock()
		if cur, ok := d.ha.dirty[tr.Node]; !ok || cur != tr {
			d.ha.mu.Unlock()
			continue
		}
		delete(d.ha.dirty, tr.Node)
		d.ha.mu.Unlock()
		if l, ok := d.live.get(tr.Node); !ok || l.State != tr.To {
			continue // changed since: that change is written
		}
		rec := nodeStateRecord{V: recordVersion, State: tr.To, Since: ms(tr.Since), LastSeen: ms(tr.LastSeen)}
		if err := d.store.Put(ctx, preNodeState+tr.Node, rec, 0); err != nil {
			d.transitionFailed(tr)
			return // etcd still away
		}
		d.log.Info("node state written after a failure", "node", tr.Node, "state", tr.To)
	}
}

// transitionWritten drops a failed write superseded by one that worked.
func (d *Director) transitionWritten(node string) {
	d.ha.mu.Lock()
	delete(d.ha.dirty, node)
	d.ha.mu.Unlock()
}

// tokenSweepEvery is how often the leader audits the join tokens that
// expired unused (token.expire; otherwise recorded only when a token is
// listed or used).
var tokenSweepEvery = time.Hour

// tokenSweepLoop audits expired tokens every tokenSweepEvery (a
// singleton: run by whileLeader).
func (d *Director) tokenSweepLoop(ctx context.Context) {
	tick := time.NewTicker(tokenSweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := d.sweepTokens(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("director: token sweep", "err", err)
		}
	}
}

func (d *Director) sweepTokens(ctx context.Context) error {
	type item struct {
		tok tokenRecord
		rev int64
	}
	var items []item
	now := d.now()
	err := d.store.List(ctx, preTokens, func(key string, rev int64, raw []byte) error {
		var t tokenRecord
		if json.Unmarshal(raw, &t) == nil && !t.ExpireAudited && t.state(now) == tokenExpired {
			items = append(items, item{t, rev})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range items {
		d.expired(ctx, &items[i].tok, items[i].rev, "director")
	}
	return nil
}
