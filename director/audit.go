package director

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/virtcon/virtcon/director/etcdstore"
)

// auditKey is audit/<unix nanos, 16 hex digits>-<8 random hex digits>:
// keys sort by time, and two entries of one instant never collide.
func auditKey(t time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%016x-%s", preAudit, t.UnixNano(), hex.EncodeToString(b[:]))
}

// txn is a store transaction that carries audit entries: they are
// written exactly when what they record is, and logged once committed.
type txn struct {
	*etcdstore.Txn
	d      *Director
	audits []auditRecord
}

func (d *Director) txn() *txn { return &txn{Txn: d.store.Txn(), d: d} }

// audit adds an entry at now.
func (t *txn) audit(now time.Time, e auditRecord) {
	e.V, e.Time = recordVersion, ms(now)
	t.Put(auditKey(now), e, t.d.opts.AuditRetention)
	t.audits = append(t.audits, e)
}

// commit commits, and logs the audit entries when it did.
func (t *txn) commit(ctx context.Context) (bool, error) {
	ok, err := t.Commit(ctx)
	if ok && err == nil {
		for _, e := range t.audits {
			t.d.logAudit(e)
		}
	}
	return ok, err
}

// audit writes one entry on its own. A failure is logged, not returned:
// the operation it records has happened already.
func (d *Director) audit(ctx context.Context, e auditRecord) {
	now := d.now()
	e.V, e.Time = recordVersion, ms(now)
	if err := d.store.Put(ctx, auditKey(now), e, d.opts.AuditRetention); err != nil {
		d.log.Warn("director: write audit entry", "kind", e.Kind, "err", err)
	}
	d.logAudit(e)
}

// logAudit mirrors an entry into the log. Entries hold ids, serials,
// addresses and reasons: never a secret.
func (d *Director) logAudit(e auditRecord) {
	attrs := []any{"kind", e.Kind}
	for _, kv := range [][2]string{{"token", e.TokenID}, {"node", e.NodeID}, {"serial", e.Serial},
		{"source", e.Source}, {"actor", e.Actor}, {"detail", e.Detail}} {
		if kv[1] != "" {
			attrs = append(attrs, kv[0], kv[1])
		}
	}
	d.log.Info("audit", attrs...)
}
