package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// EnrollOptions tune Enroll.
type EnrollOptions struct {
	// UnsafeSkipPin enrols with a join string that has no pin, trusting
	// whatever CA the director (or whoever answers at its address)
	// presents. Without it such a join string is refused (enroll.ErrNoPin).
	UnsafeSkipPin bool
	// Logger receives what happens (never the token); nil discards.
	Logger *slog.Logger
	// Now is the clock the director's certificates are checked by
	// (default time.Now).
	Now func() time.Time
	// DialContext dials the director (default: a net.Dialer).
	DialContext DialFunc
}

// enrollTimeout bounds the whole exchange with the director.
const enrollTimeout = 60 * time.Second

// Enroll trades the join string's one-time token for a node identity:
//
//  1. the director's CA is verified by the join string's pin in the TLS
//     handshake, before a byte of the request (and so the token) is sent;
//     no pin is refused unless opts.UnsafeSkipPin;
//  2. a P-256 key is made and written 0600 (key.pending.pem) before the
//     CSR goes out, and an earlier attempt's pending key is reused, so a
//     retry after a lost reply gets the same certificate;
//  3. the reply is checked: the root it returns has the pinned key again,
//     the certificate is for our key and chains to that root;
//  4. identity.pem (key + certificate + intermediate, one atomic write),
//     ca.pem and agent.yaml are written (dir 0700, files 0600), the
//     pending key and any old alert removed.
//
// A host holding a live credential is refused (ErrAlreadyEnrolled: leave
// first); one whose credential was revoked or expired enrols anew.
func Enroll(ctx context.Context, h *host.Host, join enroll.Join, opts EnrollOptions) (*Status, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := h.Layout
	if join.Pin() == "" && !opts.UnsafeSkipPin {
		return nil, fmt.Errorf("enrol with %s: %w", join.Addr(), enroll.ErrNoPin)
	}
	lock, err := tryLock(l)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	if err := checkNotEnrolled(l, opts.Now()); err != nil {
		return nil, err
	}
	if err := ensureDir(l); err != nil {
		return nil, err
	}

	view := newHostView(h)
	facts, caps := view.facts(ctx)
	key, err := loadPendingKey(l)
	if err != nil {
		return nil, err
	}
	if key == nil {
		if key, err = enroll.NewKey(); err != nil {
			return nil, err
		}
		if err := writePendingKey(l, key); err != nil {
			return nil, err
		}
	} else {
		log.Info("enrolment: reusing the key of an unfinished enrolment", "file", PendingKeyFile(l))
	}
	csr, err := enroll.NewCSR(key, facts.Hostname)
	if err != nil {
		return nil, err
	}

	v := &pinVerifier{pin: join.Pin(), host: join.Host()}
	client, tr := newClient(&tls.Config{
		InsecureSkipVerify: true, // the pin is the only trust anchor: v checks it
		ServerName:         join.Host(),
		VerifyConnection:   v.verify,
		Time:               opts.Now,
	}, opts.DialContext)
	defer tr.CloseIdleConnections()
	ec := directorv1connect.NewEnrollServiceClient(client, baseURL(join.Addr()), clientOptions()...)
	cctx, cancel := context.WithTimeout(ctx, enrollTimeout)
	defer cancel()
	log.Info("enrolling", "director", join.Addr(), "token", join.ID(), "pin", join.Pin())
	resp, err := ec.Enroll(cctx, connect.NewRequest(&directorv1.EnrollRequest{
		Token: join.Token(), CsrDer: csr, Host: facts, Capabilities: caps,
	}))
	if err != nil {
		return nil, enrollError(join, v.failure(), err)
	}
	leaf, chain, root, err := checkReply(resp.Msg.GetCertDer(), resp.Msg.GetCaChainDer(), key, opts.Now())
	if err != nil {
		return nil, fmt.Errorf("enrol with %s: %w", join.Addr(), err)
	}
	pin := enroll.SPKIPin(root)
	switch {
	case join.Pin() != "" && pin != join.Pin():
		return nil, fmt.Errorf("enrol with %s: the CA in the reply has pin %s, the join string %s: %w", join.Addr(), pin, join.Pin(), enroll.ErrPinMismatch)
	case join.Pin() == "":
		// trust on first use: the CA the director presented must be the
		// one it answered with
		if err := v.chainedTo(root); err != nil {
			return nil, fmt.Errorf("enrol with %s: %w: %w", join.Addr(), ErrBadReply, err)
		}
		log.Warn("enrolled without a pin: the director's CA was trusted as presented", "director", join.Addr(), "pin", pin)
	}
	nodeID, err := enroll.NodeIDFromCert(leaf)
	if err != nil {
		return nil, fmt.Errorf("enrol with %s: %w: %w", join.Addr(), ErrBadReply, err)
	}
	if resp.Msg.GetNodeId() != nodeID {
		return nil, fmt.Errorf("enrol with %s: %w: node id %q, the certificate says %q", join.Addr(), ErrBadReply, resp.Msg.GetNodeId(), nodeID)
	}
	cfg := &Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Director: join.Addr(), Pin: pin, NodeID: nodeID}
	if err := storeEnrolment(l, cfg, key, leaf, chain, root); err != nil {
		return nil, err
	}
	log.Info("enrolled", "director", join.Addr(), "node", nodeID, "serial", serialOf(leaf), "notAfter", leaf.NotAfter)
	return ReadStatus(l)
}

// checkNotEnrolled refuses a host with a live credential. A revoked or
// expired one (an alert, or its certificate past NotAfter) may be
// replaced; credentials that cannot be read are refused.
func checkNotEnrolled(l paths.Layout, now time.Time) error {
	if _, err := os.Stat(IdentityFile(l)); err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("agent identity: %w", err)
	}
	a, err := readAlert(l)
	if err != nil {
		return err
	}
	if a != nil {
		return nil
	}
	id, err := loadIdentity(l)
	if err != nil {
		return fmt.Errorf("%w: the credentials under %s do not load (%w); leave first", ErrAlreadyEnrolled, l.AgentDir(), err)
	}
	if !now.Before(id.leaf.NotAfter) {
		return nil
	}
	return fmt.Errorf("%w: with %s as node %s", ErrAlreadyEnrolled, id.cfg.Director, id.cfg.NodeID)
}

// storeEnrolment writes the credentials: the CA and the config first,
// identity.pem last (its presence means enrolled), then the pending key
// and an old alert go.
func storeEnrolment(l paths.Layout, cfg *Config, key *ecdsa.PrivateKey, leaf *x509.Certificate, chain []*x509.Certificate, root *x509.Certificate) error {
	if err := writeFile(CAFile(l), certPEM(root)); err != nil {
		return err
	}
	b, err := MarshalConfig(cfg)
	if err != nil {
		return err
	}
	if err := writeFile(ConfigFile(l), b); err != nil {
		return err
	}
	if err := writeIdentity(l, key, leaf, chain); err != nil {
		return err
	}
	if err := os.Remove(PendingKeyFile(l)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("pending agent key: %w", err)
	}
	return removeAlert(l)
}

// checkReply parses the director's certificate and chain ([intermediate…,
// root]) and checks that the certificate is for key, for client
// authentication, and chains to the root.
func checkReply(certDER []byte, chainDER [][]byte, key *ecdsa.PrivateKey, now time.Time) (leaf *x509.Certificate, chain []*x509.Certificate, root *x509.Certificate, err error) {
	leaf, err = x509.ParseCertificate(certDER)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: certificate: %w", ErrBadReply, err)
	}
	if len(chainDER) < 2 {
		return nil, nil, nil, fmt.Errorf("%w: CA chain of %d certificates, want [intermediate, root]", ErrBadReply, len(chainDER))
	}
	for i, der := range chainDER {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: CA chain certificate %d: %w", ErrBadReply, i+1, err)
		}
		chain = append(chain, c)
	}
	root, chain = chain[len(chain)-1], chain[:len(chain)-1]
	if !samePublicKey(leaf, key) {
		return nil, nil, nil, fmt.Errorf("%w: the certificate is not for this host's key", ErrBadReply)
	}
	if err := verifyLeaf(leaf, chain, root, now); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	return leaf, chain, root, nil
}

func verifyLeaf(leaf *x509.Certificate, chain []*x509.Certificate, root *x509.Certificate, now time.Time) error {
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	for _, c := range chain {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return fmt.Errorf("node certificate serial %s: %w", serialOf(leaf), err)
	}
	return nil
}

// enrollError words a failed Enroll call: the pin check's own error when
// the handshake failed on it, the director's refusal by its code.
func enrollError(join enroll.Join, pinErr, err error) error {
	if pinErr != nil {
		return fmt.Errorf("enrol with %s: nothing was sent: %w", join.Addr(), pinErr)
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnauthenticated:
			return fmt.Errorf("enrol with %s: token %s: %w (unknown, already used, expired or revoked)", join.Addr(), join.ID(), ErrTokenRefused)
		case connect.CodePermissionDenied, connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
			return fmt.Errorf("enrol with %s: %w: %s", join.Addr(), ErrEnrollDenied, ce.Message())
		}
	}
	return fmt.Errorf("enrol with %s: %w", join.Addr(), err)
}

// pinVerifier is the enrolment's VerifyConnection: the pin check of
// package enroll, keeping what it saw, so that its error is told from
// the transport's and an unpinned enrolment can compare the presented
// chain with the CA in the reply.
type pinVerifier struct {
	pin, host string

	mu    sync.Mutex
	err   error
	state *tls.ConnectionState
}

func (v *pinVerifier) verify(cs tls.ConnectionState) error {
	var err error
	if v.pin != "" {
		err = enroll.VerifyPinned(v.pin, v.host)(cs)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.err, v.state = err, &cs
	return err
}

func (v *pinVerifier) failure() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// chainedTo checks that the presented server certificate is valid for
// the host under root.
func (v *pinVerifier) chainedTo(root *x509.Certificate) error {
	v.mu.Lock()
	cs := v.state
	v.mu.Unlock()
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return errors.New("no server certificate was seen")
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: v.host, Roots: roots, Intermediates: inter}); err != nil {
		return fmt.Errorf("the director's server certificate is not of the CA it answered with: %w", err)
	}
	return nil
}

func writeFile(path string, data []byte) error {
	if err := atomicfile.Write(path, data, fileMode); err != nil {
		return fmt.Errorf("agent credentials: %w", err)
	}
	return nil
}
