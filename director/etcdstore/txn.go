package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Txn is a conditional write: every condition holds and every operation
// is applied, or nothing is written. Build it with the chained methods and
// Commit it once.
type Txn struct {
	s    *Store
	cmps []clientv3.Cmp
	ops  []txnOp
	err  error
}

type txnOp struct {
	key   string // full key
	val   string
	ttl   time.Duration
	lease clientv3.LeaseID // PutLease's: kept alive by its owner
	del   bool
}

// Txn starts an empty transaction.
func (s *Store) Txn() *Txn { return &Txn{s: s} }

func (t *Txn) fullKey(key string) (string, bool) {
	k, err := t.s.key(key)
	if err != nil && t.err == nil {
		t.err = err
	}
	return k, err == nil
}

// IfRev holds when key's ModRevision is rev; rev 0 means key is absent.
func (t *Txn) IfRev(key string, rev int64) *Txn {
	if rev < 0 && t.err == nil {
		t.err = fmt.Errorf("etcdstore: txn: key %q: negative revision %d", key, rev)
	}
	if k, ok := t.fullKey(key); ok {
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
	}
	return t
}

// IfAbsent holds when key does not exist.
func (t *Txn) IfAbsent(key string) *Txn {
	if k, ok := t.fullKey(key); ok {
		t.cmps = append(t.cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
	}
	return t
}

// Put stores v as JSON under key, with a lease when ttl > 0 (as Store.Put).
func (t *Txn) Put(key string, v any, ttl time.Duration) *Txn {
	k, ok := t.fullKey(key)
	if !ok {
		return t
	}
	if ttl < 0 && t.err == nil {
		t.err = fmt.Errorf("etcdstore: txn: put %q: negative ttl %s", key, ttl)
	}
	b, err := json.Marshal(v)
	if err != nil && t.err == nil {
		t.err = fmt.Errorf("etcdstore: txn: put %q: encode: %w", key, err)
	}
	t.ops = append(t.ops, txnOp{key: k, val: string(b), ttl: ttl})
	return t
}

// PutLease stores v as JSON under key on l: the key lives as long as the
// lease is kept alive, and goes when it is revoked or lost. A lease etcd
// no longer knows fails the Commit with ErrLeaseGone.
func (t *Txn) PutLease(key string, v any, l *KeepAliveLease) *Txn {
	k, ok := t.fullKey(key)
	if !ok {
		return t
	}
	if (l == nil || l.id == 0) && t.err == nil {
		t.err = fmt.Errorf("etcdstore: txn: put %q: no lease", key)
	}
	b, err := json.Marshal(v)
	if err != nil && t.err == nil {
		t.err = fmt.Errorf("etcdstore: txn: put %q: encode: %w", key, err)
	}
	op := txnOp{key: k, val: string(b)}
	if l != nil {
		op.lease = l.id
	}
	t.ops = append(t.ops, op)
	return t
}

// Delete removes key (absent is fine).
func (t *Txn) Delete(key string) *Txn {
	if k, ok := t.fullKey(key); ok {
		t.ops = append(t.ops, txnOp{key: k, del: true})
	}
	return t
}

// Commit applies the transaction. ok is false when a condition did not
// hold: nothing was written then.
func (t *Txn) Commit(ctx context.Context) (ok bool, err error) {
	ok, _, err = t.CommitRev(ctx)
	return ok, err
}

// CommitRev is Commit that also returns the store's revision after the
// transaction: the ModRevision of every key it put when ok.
func (t *Txn) CommitRev(ctx context.Context) (ok bool, rev int64, err error) {
	if t.err != nil {
		return false, 0, t.err
	}
	ctx, done := t.s.request(ctx) // one bound for the grants and the txn
	for attempt := 0; ; attempt++ {
		leases := map[time.Duration]clientv3.LeaseID{}
		ops := make([]clientv3.Op, 0, len(t.ops))
		for _, op := range t.ops {
			switch {
			case op.del:
				ops = append(ops, clientv3.OpDelete(op.key))
			case op.lease != 0:
				ops = append(ops, clientv3.OpPut(op.key, op.val, clientv3.WithLease(op.lease)))
			case op.ttl > 0:
				id, ok := leases[op.ttl]
				if !ok {
					if id, err = t.s.lease(ctx, op.ttl); err != nil {
						return false, 0, fmt.Errorf("etcdstore: txn: %w", done(err))
					}
					leases[op.ttl] = id
				}
				ops = append(ops, clientv3.OpPut(op.key, op.val, clientv3.WithLease(id)))
			default:
				ops = append(ops, clientv3.OpPut(op.key, op.val))
			}
		}
		resp, err := t.s.cli.Txn(ctx).If(t.cmps...).Then(ops...).Commit()
		if attempt == 0 && len(leases) > 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			for _, id := range leases {
				t.s.forgetLease(id)
			}
			continue
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && t.ownLeases() {
			done(nil)
			return false, 0, fmt.Errorf("etcdstore: txn: %w", ErrLeaseGone)
		}
		if err := done(err); err != nil {
			return false, 0, fmt.Errorf("etcdstore: txn: %w", err)
		}
		return resp.Succeeded, resp.Header.Revision, nil
	}
}

// ownLeases reports whether the txn puts keys on leases of PutLease.
func (t *Txn) ownLeases() bool {
	for _, op := range t.ops {
		if op.lease != 0 {
			return true
		}
	}
	return false
}
