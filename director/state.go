package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/virtcon/virtcon/director/etcdstore"
)

// keepFor is a lease TTL for a record that must outlive until: rounded up
// to the hour (so records share the store's hourly leases), an hour at
// least.
func keepFor(now, until time.Time) time.Duration {
	d := until.Sub(now)
	if d < time.Hour {
		return time.Hour
	}
	return (d + time.Hour - 1).Truncate(time.Hour)
}

// loadState reads the revoked serials and the known nodes, and starts
// the watches that keep the revocation set and the liveness tracker
// current while the director runs.
func (d *Director) loadState(ctx context.Context) error {
	rev, err := d.listRevoked(ctx)
	if err != nil {
		return err
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.followRevoked(d.bg, rev)
	}()

	states := map[string]nodeStateRecord{}
	err = d.store.List(ctx, preNodeState, func(key string, _ int64, raw []byte) error {
		var s nodeStateRecord
		if err := json.Unmarshal(raw, &s); err != nil {
			d.log.Warn("director: unreadable node state: ignored", "key", key, "err", err)
			return nil
		}
		states[strings.TrimPrefix(key, preNodeState)] = s
		return nil
	})
	if err != nil {
		return fmt.Errorf("director: load node states: %w", err)
	}
	start := d.now()
	nrev, err := d.store.ListRev(ctx, preNodes, func(key string, _ int64, raw []byte) error {
		var n nodeRecord
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("director: node record %s: %w", key, err)
		}
		if n.revoked() {
			d.mu.Lock()
			d.revokedNodes[n.ID] = n.RevokeReason
			d.mu.Unlock()
			return nil
		}
		// Known nodes start as last seen now: honest, and Offline
		// after OfflineAfter unless they come back. One that was
		// Offline stays Offline until it is heard from.
		d.live.add(n.ID, start, states[n.ID].State == StateOffline)
		return nil
	})
	if err != nil {
		return fmt.Errorf("director: load nodes: %w", err)
	}
	d.mu.Lock()
	d.nodesLive = true
	d.mu.Unlock()
	err = d.store.List(ctx, preReports, func(key string, _ int64, raw []byte) error {
		var r reportRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			d.log.Warn("director: unreadable report: ignored", "key", key, "err", err)
			return nil
		}
		node := strings.TrimPrefix(key, preReports)
		d.mu.Lock()
		d.reports[node] = &nodeReport{at: fromMS(r.At), vms: r.VMs}
		d.mu.Unlock()
		return nil
	})
	if err != nil {
		return fmt.Errorf("director: load reports: %w", err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.followNodes(d.bg, nrev)
	}()
	return nil
}

func (d *Director) listRevoked(ctx context.Context) (int64, error) {
	set := map[string]revokedRecord{}
	rev, err := d.store.ListRev(ctx, preRevoked, func(key string, _ int64, raw []byte) error {
		var r revokedRecord
		if err := json.Unmarshal(raw, &r); err != nil || r.Serial == "" {
			// Unreadable: still revoked (fail closed), by its key.
			r = revokedRecord{Serial: strings.TrimPrefix(key, preRevoked), Reason: "unreadable record"}
		}
		set[r.Serial] = r
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("director: load revocations: %w", err)
	}
	d.mu.Lock()
	for s, r := range set {
		d.revoked[s] = r
	}
	d.revokedLive = true
	d.mu.Unlock()
	return rev, nil
}

// followRevoked keeps the revocation set current from the watch on
// revoked/, and cuts the live session of a serial revoked anywhere. While
// the watch is broken (etcd unreachable: a revocation made on another
// replica would not be seen) and after it ended (compaction) the set is
// marked not current, which refuses node requests, until the watch has
// resumed and caught up or a fresh listing succeeded.
func (d *Director) followRevoked(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range d.store.Watch(ctx, preRevoked, rev+1) {
			if ev.Status() {
				d.mu.Lock()
				d.revokedLive = ev.Resumed
				d.mu.Unlock()
				if ev.Broken {
					d.log.Warn("director: revocation watch broken: node requests refused until it resumes", "err", ev.Err)
				} else {
					d.log.Info("director: revocation watch resumed")
				}
				continue
			}
			serial := strings.TrimPrefix(ev.Key, preRevoked)
			if ev.Deleted {
				// Its lease ran out after the certificate expired: an
				// expired certificate is refused anyway.
				d.mu.Lock()
				delete(d.revoked, serial)
				d.mu.Unlock()
				continue
			}
			var r revokedRecord
			if err := json.Unmarshal(ev.Raw, &r); err != nil || r.Serial == "" {
				r = revokedRecord{Serial: serial, Reason: "unreadable record"}
			}
			d.applyRevoked(r)
		}
		if ctx.Err() != nil {
			return
		}
		d.mu.Lock()
		d.revokedLive = false
		d.mu.Unlock()
		d.log.Warn("director: revocation watch ended: listing again")
		for ctx.Err() == nil {
			var err error
			if rev, err = d.listRevoked(ctx); err == nil {
				break
			}
			d.log.Error("director: list revocations", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// applyRevoked adds a revoked serial to the set and cuts the session that
// uses it, at once.
func (d *Director) applyRevoked(r revokedRecord) {
	d.mu.Lock()
	d.revoked[r.Serial] = r
	var cut *liveSession
	if s := d.sessions[r.NodeID]; s != nil && s.serial == r.Serial {
		cut = s
	} else if r.NodeID == "" {
		for _, s := range d.sessions {
			if s.serial == r.Serial {
				cut = s
			}
		}
	}
	d.mu.Unlock()
	if cut != nil {
		cut.cut(errCertRevoked, r.Reason)
	}
}

func (d *Director) isRevoked(serial string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.revoked[serial]
	return ok
}

// followNodes adds nodes enrolled elsewhere to the liveness tracker and
// drops forgotten ones.
func (d *Director) followNodes(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range d.store.Watch(ctx, preNodes, rev+1) {
			if ev.Status() {
				// Revoked nodes may be missed while broken: node
				// requests are refused until it resumed.
				d.mu.Lock()
				d.nodesLive = ev.Resumed
				d.mu.Unlock()
				continue
			}
			rev = ev.Rev
			id := strings.TrimPrefix(ev.Key, preNodes)
			if ev.Deleted {
				d.live.remove(id)
				d.mu.Lock()
				delete(d.reports, id)
				delete(d.revokedNodes, id)
				d.mu.Unlock()
				d.invMu.Lock()
				delete(d.inv, id)
				d.invMu.Unlock()
				continue
			}
			var n nodeRecord
			if err := json.Unmarshal(ev.Raw, &n); err != nil {
				d.log.Warn("director: unreadable node record: ignored", "key", ev.Key, "err", err)
				continue
			}
			if n.revoked() {
				d.markNodeRevoked(id, n.RevokeReason)
				d.live.remove(id)
			} else {
				d.live.add(id, d.now(), false)
			}
		}
		if ctx.Err() != nil {
			return
		}
		// Compacted: list again from now (node requests refused until
		// then: a revocation may have been missed).
		d.mu.Lock()
		d.nodesLive = false
		d.mu.Unlock()
		nrev, err := d.store.ListRev(ctx, preNodes, func(key string, _ int64, raw []byte) error {
			var n nodeRecord
			if json.Unmarshal(raw, &n) == nil && n.revoked() {
				d.markNodeRevoked(n.ID, n.RevokeReason)
				d.live.remove(n.ID)
			}
			return nil
		})
		if err != nil {
			d.log.Error("director: list nodes", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		rev = nrev
		d.mu.Lock()
		d.nodesLive = true
		d.mu.Unlock()
	}
}

// getNode reads nodes/<id>; a missing node is etcdstore.ErrNotFound.
func (d *Director) getNode(ctx context.Context, id string) (*nodeRecord, int64, error) {
	var n nodeRecord
	rev, err := d.store.Get(ctx, preNodes+id, &n)
	if err != nil {
		return nil, 0, err
	}
	return &n, rev, nil
}

func notFound(err error) bool { return errors.Is(err, etcdstore.ErrNotFound) }

// maxSerialsPerTxn bounds the serials one revocation transaction writes
// (two operations each: revoked/<serial> and its audit entry), well under
// etcd's default of 128 operations per transaction.
const maxSerialsPerTxn = 50

// revokeNode marks a node revoked, cuts its session, then revokes every
// certificate of it. kind is the audit kind (node.revoke, node.leave,
// node.forget), detail its text. The node's record is written first, on
// its own: from then on every request of the node is refused by its
// state, even if a later write of its serials fails; the serials follow
// in transactions of at most maxSerialsPerTxn. Revoking a revoked node
// again only writes the serials still missing from revoked/.
func (d *Director) revokeNode(ctx context.Context, id, reason, detail, kind string, who actor) (*nodeRecord, error) {
	for attempt := 0; attempt < 5; attempt++ {
		n, rev, err := d.getNode(ctx, id)
		if err != nil {
			return nil, err
		}
		if n.revoked() {
			d.markNodeRevoked(id, n.RevokeReason)
			if err := d.revokeSerials(ctx, n, n.RevokeReason, who); err != nil {
				return nil, fmt.Errorf("revoke node %s: %w", id, err)
			}
			return n, nil
		}
		now := d.now()
		n.RevokedAt, n.RevokeReason = ms(now), reason
		txn := d.txn()
		txn.IfRev(preNodes+id, rev).Put(preNodes+id, n, 0)
		txn.audit(now, auditRecord{Kind: kind, NodeID: id, Source: who.source, Actor: who.name, Detail: detail})
		ok, err := txn.commit(ctx)
		if err != nil {
			return nil, fmt.Errorf("revoke node %s: %w", id, err)
		}
		if !ok {
			continue // the record changed (a renewal, a session): again
		}
		d.markNodeRevoked(id, reason)
		d.live.remove(id)
		if err := d.revokeSerials(ctx, n, reason, who); err != nil {
			return nil, fmt.Errorf("revoke node %s: the node is revoked (its requests are refused) but not all its certificates: %w", id, err)
		}
		d.log.Info("node revoked", "node", id, "reason", reason, "by", who.name, "serials", len(n.Certs))
		return n, nil
	}
	return nil, fmt.Errorf("revoke node %s: the record kept changing", id)
}

// revokeSerials writes revoked/<serial> for every certificate of n not
// revoked yet, maxSerialsPerTxn to a transaction.
func (d *Director) revokeSerials(ctx context.Context, n *nodeRecord, reason string, who actor) error {
	var todo []nodeCert
	for _, c := range n.Certs {
		if !d.isRevoked(c.Serial) {
			todo = append(todo, c)
		}
	}
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), maxSerialsPerTxn)]
		todo = todo[len(chunk):]
		now := d.now()
		txn := d.txn()
		var recs []revokedRecord
		for _, c := range chunk {
			r := revokedRecord{V: recordVersion, Serial: c.Serial, NodeID: n.ID, Reason: reason, At: ms(now)}
			recs = append(recs, r)
			txn.Put(preRevoked+c.Serial, r, keepFor(now, fromMS(c.NotAfter).Add(24*time.Hour)))
			txn.audit(now, auditRecord{Kind: "cert.revoke", NodeID: n.ID, Serial: c.Serial,
				Source: who.source, Actor: who.name, Detail: reason})
		}
		if _, err := txn.commit(ctx); err != nil {
			return fmt.Errorf("revoke certificates: %w", err)
		}
		for _, r := range recs {
			d.applyRevoked(r)
		}
	}
	return nil
}

// markNodeRevoked records that a node is revoked, which the per-request
// check refuses whatever its serials, and cuts its session.
func (d *Director) markNodeRevoked(id, reason string) {
	d.mu.Lock()
	d.revokedNodes[id] = reason
	s := d.sessions[id]
	d.mu.Unlock()
	if s != nil {
		s.cut(errCertRevoked, reason)
	}
}
