package webterm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/paths"
)

// Defaults for Options.
const (
	DefaultMaxSessions    = 4
	DefaultMaxPerUser     = 2
	DefaultMaxLogins      = 8
	DefaultIdleWarning    = 60 * time.Second
	DefaultLifetime       = 8 * time.Hour
	DefaultReattachWindow = 20 * time.Second
)

// Authenticator logs a web user in: PAM, the admin group, the shared
// rate limit and the audit log (an *auth.Authenticator whose PAMProcess
// is the dcui program in production). tty is auth.WebTTY(source address).
type Authenticator interface {
	Login(ctx context.Context, user, password, tty string) (*auth.Identity, error)
}

// Options configure a Server. Certificate, AllowHosts, Authenticator and
// DCUI are required; the rest have defaults.
type Options struct {
	// Layout is virtcon's file layout: the sessions file goes under its
	// RunDir, and each session's DCUI gets its root (--root).
	Layout paths.Layout
	Logger *slog.Logger
	// Certificate is the server's TLS certificate and key (Cert.TLS of
	// EnsureCert).
	Certificate tls.Certificate
	// Static is the front end (Static): index.html at its top.
	Static fs.FS
	// AllowHosts are the names and addresses a browser may use to reach
	// the server, in the Host header and the WebSocket's Origin: the
	// certificate's SANs plus --allow-host. A wildcard (*.example.org)
	// stands for one label, as in a certificate; the address a connection
	// came in on is always accepted. Anything else is refused, so a
	// name that an attacker points at this host (DNS rebinding) gets
	// nowhere.
	AllowHosts []string
	// Authenticator checks the login form's user and password.
	Authenticator Authenticator
	// DCUI is the dcui program each session runs in its PTY.
	DCUI string

	// MaxSessions and MaxPerUser cap the sessions (each a DCUI in a PTY):
	// in all and per user (defaults 4 and 2). MaxLogins caps the logins
	// in progress at once, PAM conversations each (default 8).
	MaxSessions, MaxPerUser, MaxLogins int
	// IdleTimeout ends a login after this long without a key press
	// (default auth.DefaultIdleTimeout); the browser is warned
	// IdleWarning before (default 60 s). Lifetime ends it this long after
	// the login, whatever happens (default 8 h). A session whose
	// WebSocket dropped keeps its DCUI for ReattachWindow (default 20 s)
	// for the same login to take it back.
	IdleTimeout, IdleWarning, Lifetime, ReattachWindow time.Duration
	// Now is the wall clock for the times recorded (default time.Now);
	// the timeouts run on the monotonic clock.
	Now func() time.Time
}

// Server is the web terminal: HTTPS only, a login through Authenticator,
// and per WebSocket a DCUI in a PTY. Safe for concurrent use.
type Server struct {
	opts  Options
	log   *slog.Logger
	tls   *tls.Config
	cert  atomic.Pointer[tls.Certificate] // what new handshakes get (SetCertificate)
	allow map[string]bool                 // lower-case names and canonical addresses
	// wildcards are the suffixes of wildcard names (".example.org" for
	// *.example.org): one label before it matches
	wildcards []string
	handler   http.Handler
	logins    chan struct{} // a token per login in progress
	// hangupGrace: SIGHUP, then this long before SIGKILL
	hangupGrace time.Duration

	startMu  sync.Mutex // one session start at a time (the limits)
	fileMu   sync.Mutex // the sessions file
	mu       sync.Mutex
	sessions map[string]*login // by cookieKey
	closing  bool
	ctx      context.Context // the server's, for what outlives a request
	children sync.WaitGroup  // every DCUI until reaped
	served   bool
}

// Errors New returns for bad options.
var ErrInvalidOptions = errors.New("web terminal: invalid options")

// New checks opts and returns a server ready to Serve.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	setDefault(&opts.MaxSessions, DefaultMaxSessions)
	setDefault(&opts.MaxPerUser, DefaultMaxPerUser)
	setDefault(&opts.MaxLogins, DefaultMaxLogins)
	setDefault(&opts.IdleTimeout, auth.DefaultIdleTimeout)
	setDefault(&opts.IdleWarning, DefaultIdleWarning)
	setDefault(&opts.Lifetime, DefaultLifetime)
	setDefault(&opts.ReattachWindow, DefaultReattachWindow)
	switch {
	case opts.Layout.Root == "":
		return nil, fmt.Errorf("%w: no layout (paths.New)", ErrInvalidOptions)
	case len(opts.Certificate.Certificate) == 0 || opts.Certificate.PrivateKey == nil:
		return nil, fmt.Errorf("%w: no TLS certificate and key", ErrInvalidOptions)
	case opts.Authenticator == nil:
		return nil, fmt.Errorf("%w: no authenticator", ErrInvalidOptions)
	case opts.DCUI == "":
		return nil, fmt.Errorf("%w: no dcui program", ErrInvalidOptions)
	case opts.Static == nil:
		return nil, fmt.Errorf("%w: no front end (Static)", ErrInvalidOptions)
	case opts.IdleWarning >= opts.IdleTimeout:
		return nil, fmt.Errorf("%w: idle warning %s: must be shorter than the idle timeout %s", ErrInvalidOptions, opts.IdleWarning, opts.IdleTimeout)
	}
	allow := map[string]bool{}
	var wildcards []string
	for _, h := range opts.AllowHosts {
		n := canonicalHost(h)
		if n == "" || strings.ContainsAny(n, "/:@ ") && !isAddr(n) {
			return nil, fmt.Errorf("%w: allowed host %q: want a DNS name or an IP address", ErrInvalidOptions, h)
		}
		if suffix, ok := strings.CutPrefix(n, "*"); ok && strings.HasPrefix(suffix, ".") && !strings.Contains(suffix, "*") {
			// a wildcard SAN (*.example.org): one label in its place, as
			// in a certificate
			wildcards = append(wildcards, suffix)
			continue
		}
		if strings.Contains(n, "*") {
			return nil, fmt.Errorf("%w: allowed host %q: a wildcard is only a whole first label (*.example.org)", ErrInvalidOptions, h)
		}
		allow[n] = true
	}
	if len(allow) == 0 && len(wildcards) == 0 {
		return nil, fmt.Errorf("%w: no allowed host names (the certificate's names and --allow-host)", ErrInvalidOptions)
	}
	s := &Server{
		opts:        opts,
		log:         opts.Logger,
		allow:       allow,
		wildcards:   wildcards,
		logins:      make(chan struct{}, opts.MaxLogins),
		hangupGrace: hangupGrace,
		sessions:    map[string]*login{},
		ctx:         context.Background(),
		tls: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// HTTP/1.1 only: the WebSocket upgrade needs it, and one
			// protocol is one set of behaviours to get right.
			NextProtos: []string{"http/1.1"},
		},
	}
	cert := opts.Certificate
	s.cert.Store(&cert)
	s.tls.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil }
	s.handler = s.routes()
	return s, nil
}

func setDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// routes is the whole handler: headers on every answer, then the Host
// check, then http.CrossOriginProtection, then the endpoints.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/login", s.handleLogin)
	mux.HandleFunc("POST /api/logout", s.handleLogout)
	mux.HandleFunc("GET /api/session", s.handleSession)
	mux.HandleFunc("GET /ws", s.handleWS)
	mux.Handle("GET /", http.FileServerFS(s.opts.Static))
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.log.Warn("web terminal: cross-origin request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec-fetch-site", r.Header.Get("Sec-Fetch-Site"), "source", sourceAddr(r))
		writeError(w, http.StatusForbidden, "cross-origin request refused")
	}))
	return s.headers(s.checkHost(cop.Handler(mux)))
}

// contentSecurityPolicy: everything from this server only, nothing
// inline, no framing. xterm.js 6's DOM renderer writes <style> elements
// and style attributes, which default-src 'self' refuses; the page's
// xterm-csp.js (imported before xterm) routes both through the CSSOM,
// which CSP does not govern, so no 'unsafe-inline' is needed for styles
// either. The WebSocket is connect-src, which falls back to 'self' (wss:
// to this host). base-uri and form-action do not fall back to
// default-src: they are set here.
const contentSecurityPolicy = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// headers sets the security headers on every answer, refusals included.
func (s *Server) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Strict-Transport-Security", "max-age=31536000")
		h.Set("X-Frame-Options", "DENY")
		if strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/ws" {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// checkHost refuses a request whose Host is not an allowed name or
// address (the port does not matter): a browser sent there by a name the
// attacker controls (DNS rebinding) reaches nothing.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.allowed(r, hostOfHostPort(r.Host)) {
			s.log.Warn("web terminal: request for a host name not served", "host", r.Host, "source", sourceAddr(r))
			writeError(w, http.StatusMisdirectedRequest, "this server does not serve "+quoteHost(r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowed says whether a browser may reach the server by host in r: a
// name or address on the list, a name one label under a wildcard, or the
// very address r came in on. A DNS rebinding attack always uses a name,
// so the connection's own address is safe, and a host whose address
// changed (DHCP) is reachable by the new one without a restart.
func (s *Server) allowed(r *http.Request, host string) bool {
	h := canonicalHost(host)
	switch {
	case h == "":
		return false
	case s.allow[h]:
		return true
	}
	if a, err := netip.ParseAddr(h); err == nil {
		la, ok := localAddr(r)
		return ok && a == la
	}
	for _, suffix := range s.wildcards {
		if label, ok := strings.CutSuffix(h, suffix); ok && label != "" && !strings.Contains(label, ".") && validDNSName(h) {
			return true
		}
	}
	return false
}

// localAddr is the address of this host that r's connection came in on.
func localAddr(r *http.Request) (netip.Addr, bool) {
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	ap, err := netip.ParseAddrPort(addrString(la))
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// Serve serves HTTPS on ln until ctx ends, then shuts down: every
// session's browser gets an exit message, every DCUI SIGHUP (SIGKILL
// after 5 s) and is reaped before Serve returns. ln is wrapped in TLS
// here; nothing is ever served in plain HTTP. Serve may be called once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.served {
		s.mu.Unlock()
		return errors.New("web terminal: Serve called twice")
	}
	s.served = true
	s.ctx = context.WithoutCancel(ctx)
	s.mu.Unlock()

	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		// TLS handshakes that fail (a browser that does not trust the
		// certificate yet, scanners) are routine: debug level.
		ErrorLog: log.New(slogWriter{s.log}, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		s.shutdown()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(tls.NewListener(newLimitListener(ln, maxConns, s.log), s.tls))
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		s.children.Wait()
		s.removeSessions()
		return nil
	}
	// the listener failed: end the sessions all the same
	s.shutdown()
	s.children.Wait()
	s.removeSessions()
	return fmt.Errorf("web terminal: serve %s: %w", ln.Addr(), err)
}

// Handler is the server's HTTP handler, for tests that serve it
// themselves (over TLS: the cookie is Secure).
func (s *Server) Handler() http.Handler { return s.handler }

// TLSConfig is the configuration Serve wraps its listener in.
func (s *Server) TLSConfig() *tls.Config { return s.tls.Clone() }

// SetCertificate makes new TLS handshakes use c (a renewed certificate);
// connections already open keep theirs.
func (s *Server) SetCertificate(c tls.Certificate) { s.cert.Store(&c) }

// shutdown ends every login and session; new ones are refused.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.closing = true
	var all []*login
	for _, l := range s.sessions {
		all = append(all, l)
	}
	s.mu.Unlock()
	for _, l := range all {
		s.endLogin(l, endShutdown)
	}
}

type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Debug("web terminal: http", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

// canonicalHost is a host name or address as the allow-list keeps it:
// lower case, brackets and trailing dot dropped, an address in its
// canonical form; "" for nothing.
func canonicalHost(h string) string {
	h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(strings.TrimSpace(h), "."), "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().WithZone("").String()
	}
	return strings.ToLower(h)
}

func isAddr(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// hostOfHostPort is the host of a Host header ("name:8443", "[::1]:8443",
// "name").
func hostOfHostPort(hp string) string {
	if h, _, err := net.SplitHostPort(hp); err == nil {
		return h
	}
	return hp
}

// quoteHost shows a Host header in an error without letting it say more.
func quoteHost(h string) string {
	if len(h) > 100 {
		h = h[:100]
	}
	return fmt.Sprintf("%q", h)
}

// sourceAddr is the address the request came from (no port). A proxy's
// X-Forwarded-For is not trusted.
func sourceAddr(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return hostOfHostPort(r.RemoteAddr)
	}
	return ap.Addr().Unmap().String()
}
