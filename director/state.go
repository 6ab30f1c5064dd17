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
		if !n.revoked() {
			// Known nodes start as last seen now: honest, and Offline
			// after OfflineAfter unless they come back. One that was
			// Offline stays Offline until it is heard from.
			d.live.add(n.ID, start, states[n.ID].State == StateOffline)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("director: load nodes: %w", err)
	}
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
// revoked/, and cuts the live session of a serial revoked anywhere. When
// the watch breaks (compaction) the set is marked not current, which
// refuses node requests, until a fresh listing succeeds.
func (d *Director) followRevoked(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for ev := range d.store.Watch(ctx, preRevoked, rev+1) {
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
			rev = ev.Rev
			id := strings.TrimPrefix(ev.Key, preNodes)
			if ev.Deleted {
				d.live.remove(id)
				d.mu.Lock()
				delete(d.reports, id)
				d.mu.Unlock()
				continue
			}
			var n nodeRecord
			if err := json.Unmarshal(ev.Raw, &n); err != nil {
				d.log.Warn("director: unreadable node record: ignored", "key", ev.Key, "err", err)
				continue
			}
			if n.revoked() {
				d.live.remove(id)
			} else {
				d.live.add(id, d.now(), false)
			}
		}
		if ctx.Err() != nil {
			return
		}
		// Compacted: list again from now.
		nrev, err := d.store.ListRev(ctx, preNodes, func(string, int64, []byte) error { return nil })
		if err != nil {
			d.log.Error("director: list nodes", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		rev = nrev
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

// revokeNode revokes every certificate of a node and marks it revoked, in
// one transaction, and cuts its session. kind is the audit kind
// (node.revoke, node.leave, node.forget), detail its text. Revoking a revoked node again
// changes nothing.
func (d *Director) revokeNode(ctx context.Context, id, reason, detail, kind string, who actor) (*nodeRecord, error) {
	for attempt := 0; attempt < 5; attempt++ {
		n, rev, err := d.getNode(ctx, id)
		if err != nil {
			return nil, err
		}
		if n.revoked() {
			return n, nil
		}
		now := d.now()
		n.RevokedAt, n.RevokeReason = ms(now), reason
		txn := d.txn()
		txn.IfRev(preNodes+id, rev).Put(preNodes+id, n, 0)
		var recs []revokedRecord
		for _, c := range n.Certs {
			if d.isRevoked(c.Serial) {
				continue
			}
			r := revokedRecord{V: recordVersion, Serial: c.Serial, NodeID: id, Reason: reason, At: ms(now)}
			recs = append(recs, r)
			txn.Put(preRevoked+c.Serial, r, keepFor(now, fromMS(c.NotAfter).Add(24*time.Hour)))
			txn.audit(now, auditRecord{Kind: "cert.revoke", NodeID: id, Serial: c.Serial,
				Source: who.source, Actor: who.name, Detail: reason})
		}
		txn.audit(now, auditRecord{Kind: kind, NodeID: id, Source: who.source, Actor: who.name, Detail: detail})
		ok, err := txn.commit(ctx)
		if err != nil {
			return nil, fmt.Errorf("revoke node %s: %w", id, err)
		}
		if !ok {
			continue // the record changed (a renewal, a session): again
		}
		for _, r := range recs {
			d.applyRevoked(r)
		}
		d.live.remove(id)
		d.log.Info("node revoked", "node", id, "reason", reason, "by", who.name, "serials", len(recs))
		return n, nil
	}
	return nil, fmt.Errorf("revoke node %s: the record kept changing", id)
}
