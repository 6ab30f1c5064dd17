package director

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/enroll"
)

// errTokenRefused is all a caller learns about a bad token: which check
// failed is in the audit (token.fail) only.
var errTokenRefused = errors.New("token refused")

type enrollService struct{ d *Director }

// Enroll trades a join token and a CSR for a node certificate. The token
// is checked (secret, revocation, expiry on the director's clock, uses,
// node name), the CSR parsed, a new node id drawn and the certificate
// signed; then one transaction, conditional on the token's revision,
// records the use, the node, the certificate and the audit. A racer that
// loses reads the token again: the same key as a recorded use (within
// retryWindow) gets that use's certificate, another key is a replay.
func (e *enrollService) Enroll(ctx context.Context, req *connect.Request[directorv1.EnrollRequest]) (*connect.Response[directorv1.EnrollResponse], error) {
	d := e.d
	d.enrollAttempts.Add(1)
	source := req.Peer().Addr
	src := hostOf(source)
	// A source past the failure limit is refused before anything else
	// (hashing, the store, the audit): even with a valid token, as it is
	// most likely an attacker's.
	if until, refused := d.enrollFails.refused(src, d.now()); refused {
		return nil, d.enrollRateLimited(src, until)
	}
	msg := req.Msg
	id, secret, err := enroll.SplitToken(msg.GetToken())
	if err != nil {
		// Nothing of a malformed token is recorded: its id part may be
		// the secret.
		d.enrollFailed(ctx, src, auditRecord{Kind: "token.fail", Source: source, Detail: "malformed token"})
		return nil, connect.NewError(connect.CodeUnauthenticated, errTokenRefused)
	}
	fail := func(reason string) error {
		d.enrollFailed(ctx, src, auditRecord{Kind: "token.fail", TokenID: id, Source: source, Detail: reason})
		return connect.NewError(connect.CodeUnauthenticated, errTokenRefused)
	}
	hostname := msg.GetHost().GetHostname()

	for attempt := 0; attempt < 5; attempt++ {
		var tok tokenRecord
		rev, err := d.store.Get(ctx, preTokens+id, &tok)
		if notFound(err) {
			enroll.SecretMatches(secret, d.dummyHash) // the same time as a known id
			return nil, fail("unknown token id")
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read token %s: %w", id, err))
		}
		if !enroll.SecretMatches(secret, tok.Hash) {
			return nil, fail("wrong secret")
		}
		csr, err := enroll.ParseCSR(msg.GetCsrDer())
		if err != nil {
			d.enrollFailed(ctx, src, auditRecord{Kind: "token.fail", TokenID: id, Source: source, Detail: "bad certificate request"})
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		spki := spkiHash(csr.RawSubjectPublicKeyInfo)
		now := d.now()

		if u := tok.useBySPKI(spki); u != nil {
			// The same key again: a retry after a lost reply gets the
			// same certificate, for a while.
			if now.Sub(fromMS(u.At)) > retryWindow {
				return nil, fail("used (by this key, more than 10 minutes ago)")
			}
			resp, err := d.retryEnroll(ctx, u)
			if err != nil {
				return nil, err
			}
			d.audit(ctx, auditRecord{Kind: "token.use", TokenID: id, NodeID: u.NodeID, Serial: u.Serial,
				Source: source, Detail: "retry with the same key: the same certificate"})
			d.enrollOK.Add(1)
			return resp, nil
		}
		switch {
		case tok.RevokedAt != 0:
			return nil, fail("revoked")
		case uint32(len(tok.Uses)) >= tok.MaxUses:
			d.enrollFailed(ctx, src, auditRecord{Kind: "enroll.replay", TokenID: id, Source: source,
				Detail: fmt.Sprintf("token used %d of %d times, now with another key", len(tok.Uses), tok.MaxUses)})
			return nil, connect.NewError(connect.CodeUnauthenticated, errTokenRefused)
		case !now.Before(fromMS(tok.ExpiresAt)):
			d.expired(ctx, &tok, rev, source)
			return nil, fail("expired")
		case tok.NodeName != "" && !strings.EqualFold(hostname, tok.NodeName):
			d.enrollFailed(ctx, src, auditRecord{Kind: "token.fail", TokenID: id, Source: source,
				Detail: fmt.Sprintf("node name %q, the token is for %q", truncate(hostname, 253), tok.NodeName)})
			return nil, connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("this token is for node %q, not %q", tok.NodeName, truncate(hostname, 253)))
		}
		if !d.ca.CanSign() {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("this director cannot sign certificates (no CA key)"))
		}

		nodeID, err := enroll.NewNodeID()
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		der, serial, notAfter, err := d.ca.SignNode(csr, nodeID, now, d.opts.CertLifetime)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sign certificate for node %s", nodeID))
		}
		tok.Uses = append(tok.Uses, tokenUse{NodeID: nodeID, Serial: serial, SPKI: spki, At: ms(now), Source: source})
		node := &nodeRecord{
			V: recordVersion, ID: nodeID, Host: factsFrom(msg.GetHost()), Capabilities: capsFrom(msg.GetCapabilities()),
			TokenID: id, EnrolledAt: ms(now), Address: hostOf(source),
		}
		node.addCert(nodeCert{Serial: serial, NotAfter: ms(notAfter), IssuedAt: ms(now)}, now)
		txn := d.txn()
		txn.IfRev(preTokens+id, rev).
			Put(preTokens+id, &tok, tokenTTL(now, &tok)).
			IfAbsent(preNodes+nodeID).
			Put(preNodes+nodeID, node, 0).
			Put(preCerts+serial, certRecord{V: recordVersion, Serial: serial, NodeID: nodeID, DER: der,
				IssuedAt: ms(now), NotAfter: ms(notAfter), Kind: "enroll"}, keepFor(now, notAfter.Add(24*time.Hour)))
		txn.audit(now, auditRecord{Kind: "token.use", TokenID: id, NodeID: nodeID, Serial: serial, Source: source,
			Detail: fmt.Sprintf("use %d of %d, host %q", len(tok.Uses), tok.MaxUses, truncate(hostname, 253))})
		txn.audit(now, auditRecord{Kind: "cert.issue", TokenID: id, NodeID: nodeID, Serial: serial, Source: source})
		ok, err := txn.commit(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("record enrolment: %w", err))
		}
		if !ok {
			continue // another enrolment used the token first: look again
		}
		d.live.add(nodeID, now, false)
		d.live.seen(nodeID)
		d.enrollOK.Add(1)
		d.log.Info("node enrolled", "node", nodeID, "token", id, "serial", serial, "host", hostname, "peer", source)
		return connect.NewResponse(&directorv1.EnrollResponse{
			NodeId: nodeID, CertDer: der, CaChainDer: d.ca.Chain(), CertNotAfterUnixMs: ms(notAfter),
			Directors: d.directorAddrs(),
		}), nil
	}
	return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("token %s: kept changing while enrolling", id))
}

// retryEnroll answers a retried enrolment with the certificate of its
// earlier use.
func (d *Director) retryEnroll(ctx context.Context, u *tokenUse) (*connect.Response[directorv1.EnrollResponse], error) {
	var c certRecord
	if _, err := d.store.Get(ctx, preCerts+u.Serial, &c); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read certificate %s: %w", u.Serial, err))
	}
	return connect.NewResponse(&directorv1.EnrollResponse{
		NodeId: c.NodeID, CertDer: c.DER, CaChainDer: d.ca.Chain(), CertNotAfterUnixMs: c.NotAfter,
		Directors: d.directorAddrs(),
	}), nil
}

// expired records token.expire once per token, when an expired token is
// used or listed.
func (d *Director) expired(ctx context.Context, tok *tokenRecord, rev int64, source string) {
	if tok.ExpireAudited {
		return
	}
	now := d.now()
	t := *tok
	t.ExpireAudited = true
	txn := d.txn()
	txn.IfRev(preTokens+tok.ID, rev).Put(preTokens+tok.ID, &t, tokenTTL(now, &t))
	txn.audit(now, auditRecord{Kind: "token.expire", TokenID: tok.ID, Source: source,
		Detail: "expired " + fromMS(tok.ExpiresAt).UTC().Format(time.RFC3339)})
	if ok, err := txn.commit(ctx); err != nil {
		d.log.Warn("director: record token expiry", "token", tok.ID, "err", err)
	} else if ok {
		tok.ExpireAudited = true
	}
}

// tokenTTL keeps a token's record a day past its expiry, then etcd drops
// it.
func tokenTTL(now time.Time, t *tokenRecord) time.Duration {
	return keepFor(now, fromMS(t.ExpiresAt).Add(24*time.Hour))
}

// spkiHash is the hex SHA-256 of a public key's SubjectPublicKeyInfo.
func spkiHash(spki []byte) string {
	sum := sha256.Sum256(spki)
	return hex.EncodeToString(sum[:])
}
