package director

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/virtcon/virtcon/director/ca"
	"github.com/virtcon/virtcon/internal/atomicfile"
)

// RecoveryFileName is the replica's copy of what the hosts' identities
// hang on: the sealed CA, the node records, their certificates and the
// revoked serials. After etcd loses its data, a director restores them
// from it, so enrolled hosts reconnect with the certificates they hold
// and their agents rebuild the VM inventory (resync). Without it, a new
// CA would strand every host: each would have to enrol again.
const RecoveryFileName = "recovery.json"

// recoveryEvery is how often the replica refreshes its recovery file.
const recoveryEvery = 5 * time.Second

// ErrSecondCA refuses to make a new CA over an empty store while the data
// directory holds the key of an existing one.
var ErrSecondCA = errors.New("the store has no CA but this data directory has a key encryption key: refusing to make a second CA (enrolled hosts would have to enrol again); restore etcd, put back " + RecoveryFileName + ", or start with --new-ca")

// recoveryFile is recovery.json. Values are the records exactly as
// stored (JSON); the CA keys in them are sealed under ca.kek, so the file
// alone signs nothing. It is still 0600: it names every host.
type recoveryFile struct {
	V       int                        `json:"v"`
	At      int64                      `json:"at"`
	CA      caRecord                   `json:"ca"`
	Nodes   map[string]json.RawMessage `json:"nodes"`
	Certs   map[string]json.RawMessage `json:"certs"`
	Revoked map[string]json.RawMessage `json:"revoked"`
}

func (d *Director) recoveryPath() string { return filepath.Join(d.opts.DataDir, RecoveryFileName) }

// readRecovery reads recovery.json: nil without one; an unreadable file
// is an error (never "absent": it is what stands between a data loss and
// every host enrolling again).
func readRecovery(path string) (*recoveryFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("director: recovery file: %w", err)
	}
	var r recoveryFile
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("director: recovery file %s: %w", path, err)
	}
	if r.V != recordVersion || len(r.CA.RootCert) == 0 {
		return nil, fmt.Errorf("director: recovery file %s: version %d without a CA: not one this director wrote", path, r.V)
	}
	return &r, nil
}

// snapshotRecovery lists what recovery.json keeps.
func (d *Director) snapshotRecovery(ctx context.Context) (*recoveryFile, error) {
	r := &recoveryFile{V: recordVersion, Nodes: map[string]json.RawMessage{},
		Certs: map[string]json.RawMessage{}, Revoked: map[string]json.RawMessage{}}
	if _, err := d.store.Get(ctx, keyCA, &r.CA); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		prefix string
		into   map[string]json.RawMessage
	}{{preNodes, r.Nodes}, {preCerts, r.Certs}, {preRevoked, r.Revoked}} {
		err := d.store.List(ctx, p.prefix, func(key string, _ int64, raw []byte) error {
			p.into[strings.TrimPrefix(key, p.prefix)] = append(json.RawMessage(nil), raw...)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// writeRecovery refreshes recovery.json when what it holds changed; last
// is the previous content without its time stamp.
func (d *Director) writeRecovery(ctx context.Context, last []byte) ([]byte, error) {
	r, err := d.snapshotRecovery(ctx)
	if err != nil {
		return last, err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return last, err
	}
	if bytes.Equal(body, last) {
		return last, nil
	}
	r.At = ms(d.now())
	withAt, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return last, err
	}
	if err := atomicfile.Write(d.recoveryPath(), withAt, 0o600); err != nil {
		return last, fmt.Errorf("director: recovery file: %w", err)
	}
	return body, nil
}

// recoveryLoop keeps recovery.json current until ctx ends. A failed
// refresh (etcd without quorum) keeps the last good file.
func (d *Director) recoveryLoop(ctx context.Context) {
	last, err := d.writeRecovery(ctx, nil)
	if err != nil && ctx.Err() == nil {
		d.log.Warn("director: recovery file not refreshed", "err", err)
	}
	t := time.NewTicker(recoveryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if last, err = d.writeRecovery(ctx, last); err != nil && ctx.Err() == nil {
			d.log.Warn("director: recovery file not refreshed", "err", err)
		}
	}
}

// restoreRecovery puts the recovery file's CA, nodes, certificates and
// revocations into an empty store, each only where absent (another
// replica may be restoring at the same time), and audits it. The CA must
// open with this replica's key first: a file from another director is
// refused before anything is written.
func (d *Director) restoreRecovery(ctx context.Context, r *recoveryFile, kek []byte) (*ca.Authority, error) {
	a, err := ca.Open(ca.Sealed{RootCert: r.CA.RootCert, IntermediateCert: r.CA.IntermediateCert,
		RootKey: r.CA.RootKey, IntermediateKey: r.CA.IntermediateKey}, kek)
	if err != nil {
		return nil, fmt.Errorf("director: the CA in %s with the key encryption key %s: %w", d.recoveryPath(), d.opts.KEKFile, err)
	}
	now := d.now()
	put := func(key string, raw json.RawMessage, ttl time.Duration) error {
		_, err := d.store.Txn().IfAbsent(key).Put(key, raw, ttl).Commit(ctx)
		return err
	}
	// The CA goes last: a restore that fails halfway leaves no CA, so the
	// next start restores again (each put only where absent) instead of
	// opening a CA over a store without the revocations, which would let
	// a revoked certificate back in. Revocations go first.
	var nodes, certs, revoked int
	for serial, raw := range r.Revoked {
		var c certRecord
		until := now.Add(24 * time.Hour)
		if cr, ok := r.Certs[serial]; ok && json.Unmarshal(cr, &c) == nil && fromMS(c.NotAfter).Add(24*time.Hour).After(until) {
			until = fromMS(c.NotAfter).Add(24 * time.Hour)
		} else if !ok {
			// the certificate record is gone (expired): keep the
			// revocation the longest a node certificate lives
			until = now.Add(d.opts.CertLifetime + 24*time.Hour)
		}
		if err := put(preRevoked+serial, raw, keepFor(now, until)); err != nil {
			return nil, fmt.Errorf("director: restore revocation %s: %w", serial, err)
		}
		revoked++
	}
	for serial, raw := range r.Certs {
		var c certRecord
		if json.Unmarshal(raw, &c) != nil || !fromMS(c.NotAfter).After(now) {
			continue // expired: nothing can use it, its lease had ended
		}
		if err := put(preCerts+serial, raw, keepFor(now, fromMS(c.NotAfter))); err != nil {
			return nil, fmt.Errorf("director: restore certificate %s: %w", serial, err)
		}
		certs++
	}
	for id, raw := range r.Nodes {
		if err := put(preNodes+id, raw, 0); err != nil {
			return nil, fmt.Errorf("director: restore node %s: %w", id, err)
		}
		nodes++
	}
	ok, err := d.store.Txn().IfAbsent(keyCA).Put(keyCA, mustJSON(r.CA), 0).Commit(ctx)
	if err != nil {
		return nil, fmt.Errorf("director: restore CA: %w", err)
	}
	if !ok {
		// another replica stored one meanwhile: the same CA (restoring
		// too) or a new one, which this replica must not run beside
		var have caRecord
		if _, err := d.store.Get(ctx, keyCA, &have); err != nil {
			return nil, fmt.Errorf("director: restore CA: read the one stored meanwhile: %w", err)
		}
		if !bytes.Equal(have.RootCert, r.CA.RootCert) {
			return nil, fmt.Errorf("director: restore CA: another CA was stored while restoring from %s: not this director's", d.recoveryPath())
		}
	}
	detail := fmt.Sprintf("restored from %s written at %s: the CA, %d nodes, %d certificates, %d revocations; tokens, tasks and audit before the loss are gone; VM inventories come back as agents reconnect",
		RecoveryFileName, fromMS(r.At).UTC().Format(time.RFC3339), nodes, certs, revoked)
	d.log.Warn("director: the store had no CA: recovered", "nodes", nodes, "certs", certs, "revoked", revoked, "written", fromMS(r.At).UTC())
	d.audit(ctx, auditRecord{Kind: "director.recover", Actor: "director", Detail: detail})
	return a, nil
}

// mustJSON is v as JSON; v is a record type that always encodes.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
