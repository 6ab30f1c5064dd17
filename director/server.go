package director

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director/ca"
	"github.com/virtcon/virtcon/enroll"
)

// maxMessageBytes bounds every request message (a CSR is well under 1 KiB,
// a host report with hundreds of VMs some tens of KiB).
const maxMessageBytes = 1 << 20

// servingCert is the director's TLS certificate, re-made from the CA when
// two thirds of its life have passed, checked on every handshake.
type servingCert struct {
	mu    sync.Mutex
	ca    *ca.Authority
	names []string
	now   func() time.Time
	cert  *tls.Certificate
	renew time.Time
}

func (s *servingCert) init(a *ca.Authority, names []string, now func() time.Time) error {
	s.ca, s.names, s.now = a, names, now
	_, err := s.get()
	return err
}

func (s *servingCert) get() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.cert != nil && now.Before(s.renew) {
		return s.cert, nil
	}
	c, err := s.ca.ServingCert(s.names, now)
	if err != nil {
		if s.cert != nil && now.Before(s.cert.Leaf.NotAfter) {
			return s.cert, nil // keep the old one while it is valid
		}
		return nil, err
	}
	life := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore)
	s.cert, s.renew = c, c.Leaf.NotBefore.Add(life*2/3)
	return c, nil
}

// tlsConfig is TLS 1.3 only; a client certificate is optional at the
// handshake (Enroll has none) and, when given, verified against the root
// with the director's clock. The authn middleware decides per request.
// Session tickets are off, so every connection is verified in full.
func (d *Director) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		MaxVersion:             tls.VersionTLS13,
		ClientAuth:             tls.VerifyClientCertIfGiven,
		ClientCAs:              d.ca.ClientCAs(),
		SessionTicketsDisabled: true,
		Time:                   d.now,
		NextProtos:             []string{"h2"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return d.serving.get()
		},
	}
}

// newServer is the agents' HTTP/2-only server: EnrollService open to all,
// AgentService behind the per-request certificate check. No read or write
// timeout (they would end long-lived streams); HTTP/2 pings find dead
// peers.
func (d *Director) newServer() *http.Server {
	opts := d.handlerOptions()
	mux := http.NewServeMux()
	path, h := directorv1connect.NewEnrollServiceHandler(&enrollService{d: d}, opts...)
	mux.Handle(path, h)
	path, h = directorv1connect.NewAgentServiceHandler(&agentService{d: d}, opts...)
	mux.Handle(path, d.authn(h))

	var protos http.Protocols
	protos.SetHTTP2(true)
	return &http.Server{
		Handler:           mux,
		TLSConfig:         d.tlsConfig(),
		Protocols:         &protos,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
}

func (d *Director) handlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(maxMessageBytes),
		// gzip only what is worth it: a client that accepts gzip (connect's
		// does by default) otherwise has every 10-byte heartbeat ack
		// compressed, and setting up a deflate writer per message was 35 %
		// of the director's CPU at 1000 heartbeats/s (pprof, make bench).
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(&logInterceptor{log: d.log}),
	}
}

// compressMinBytes is the smallest answer the director gzips.
const compressMinBytes = 4096

// logInterceptor logs each call's procedure, peer and outcome code. It
// never logs a message or an error's text: an Enroll request holds the
// token's secret.
type logInterceptor struct{ log *slog.Logger }

func (l *logInterceptor) done(ctx context.Context, procedure, peer string, start time.Time, err error) {
	code := "ok"
	level := slog.LevelDebug
	if err != nil {
		code = connect.CodeOf(err).String()
		// A source refused for its failures is not logged at INFO: it
		// could fill the log as it would have the audit.
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			level = slog.LevelInfo
		}
	}
	l.log.Log(ctx, level, "rpc", "procedure", procedure, "peer", peer, "code", code,
		"ms", time.Since(start).Milliseconds())
}

func (l *logInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		l.done(ctx, req.Spec().Procedure, req.Peer().Addr, start, err)
		return resp, err
	}
}

func (l *logInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (l *logInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		l.done(ctx, conn.Spec().Procedure, conn.Peer().Addr, start, err)
		return err
	}
}

// peer is the authenticated node of a request.
type peer struct {
	NodeID   string
	Serial   string
	NotAfter time.Time
	Addr     string
}

type peerKey struct{}

func peerFrom(ctx context.Context) (peer, bool) {
	p, ok := ctx.Value(peerKey{}).(peer)
	return p, ok
}

// Reasons a node's request is refused (connect Unauthenticated).
var (
	errNoCert      = errors.New("client certificate required")
	errCertRevoked = errors.New("certificate revoked")
	errCertExpired = errors.New("certificate expired")
	errNotCurrent  = errors.New("revocation list not current: try again")
)

// authn checks the client certificate on every request, not once per
// connection: HTTP/2 carries many requests over one connection, so a
// certificate revoked or expired after the handshake must fail on the
// very next call.
func (d *Director) authn(next http.Handler) http.Handler {
	ew := connect.NewErrorWriter(d.handlerOptions()...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := d.authenticate(r)
		if err != nil {
			d.log.Info("request refused", "path", r.URL.Path, "peer", r.RemoteAddr, "why", err.Error())
			ew.Write(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerKey{}, p)))
	})
}

func (d *Director) authenticate(r *http.Request) (peer, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || len(r.TLS.VerifiedChains) == 0 {
		return peer{}, connect.NewError(connect.CodeUnauthenticated, errNoCert)
	}
	leaf := r.TLS.PeerCertificates[0]
	p := peer{Serial: ca.Serial(leaf), NotAfter: leaf.NotAfter, Addr: r.RemoteAddr}
	id, err := enroll.NodeIDFromCert(leaf)
	if err != nil {
		return peer{}, connect.NewError(connect.CodeUnauthenticated, err)
	}
	p.NodeID = id
	if err := d.checkCert(leaf, p.Serial, id); err != nil {
		return peer{}, err
	}
	return p, nil
}

// checkCert is the per-request check of a verified leaf: neither its
// serial nor its node revoked, not expired by the director's clock, and
// the revocation list current.
func (d *Director) checkCert(leaf *x509.Certificate, serial, node string) error {
	d.mu.Lock()
	_, revoked := d.revoked[serial]
	_, nodeRevoked := d.revokedNodes[node]
	live := d.revokedLive && d.nodesLive
	d.mu.Unlock()
	now := d.now()
	switch {
	case revoked, nodeRevoked:
		return connect.NewError(connect.CodeUnauthenticated, errCertRevoked)
	case now.After(leaf.NotAfter):
		return connect.NewError(connect.CodeUnauthenticated, errCertExpired)
	case now.Before(leaf.NotBefore):
		return connect.NewError(connect.CodeUnauthenticated, errors.New("certificate not yet valid"))
	case !live:
		// Fail closed: without a current list a revoked node could pass.
		return connect.NewError(connect.CodeUnavailable, errNotCurrent)
	}
	return nil
}
