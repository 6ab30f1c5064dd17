package webterm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/virtcon/virtcon/auth"
)

// CookieName is the login cookie. The __Host- prefix makes the browser
// keep it only when it is Secure, has Path=/ and no Domain: no other host
// (a sibling under the same domain) can set or overwrite it.
const CookieName = "__Host-virtcon"

// CSRFHeader carries the login's CSRF token on POST /api/logout.
const CSRFHeader = "X-CSRF-Token"

const (
	maxLoginBody = 4 << 10
	// loginTimeout bounds one PAM conversation: a hung PAM module must not
	// hold a login slot for ever.
	loginTimeout = 60 * time.Second
)

// loginBodyTimeout bounds the reading of a login's body (a variable for
// the tests).
var loginBodyTimeout = 10 * time.Second

// login is a logged-in browser: what its cookie stands for. The table
// keys it by cookieKey, the SHA-256 of the cookie: the cookie itself is
// neither kept nor logged, so a memory dump or a log line cannot be
// replayed as a login.
type login struct {
	key     string // cookieKey of its cookie
	id      string // short id for the log; not derived from the cookie
	ident   auth.Identity
	source  string
	created time.Time // Options.Now at login
	csrf    string
	// guarded by Server.mu:
	start     time.Time // monotonic, for the lifetime
	lastInput time.Time // monotonic, for the idle timeout
	warned    bool      // idle warning sent for this idle period
	refused   string    // why its last WebSocket was refused (a limit); "" once one attached
	ended     bool
	terms     []*terminal
	kick      chan struct{} // the idle watcher re-reads the times
	done      chan struct{} // closed when it ends
}

// Why a login or a session ends: the WebSocket close code and reason the
// browser gets, and the words of the exit message and the log.
type endReason struct {
	code   int // WebSocket close code; 0: no close frame (the socket is gone)
	reason string
	exit   bool // send {"t":"exit"} first
}

var (
	endIdle     = endReason{code: 4001, reason: "idle timeout"}
	endLogout   = endReason{code: 4003, reason: "logged out"}
	endLifetime = endReason{code: 4008, reason: "session lifetime over"}
	endShutdown = endReason{code: 1001, reason: "the web terminal is shutting down", exit: true}
	endWindow   = endReason{reason: "not reattached in time"}
	endLastTerm = endReason{code: 1000, reason: "the DCUI exited"}
)

type loginRequest struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

type sessionResponse struct {
	CSRF string `json:"csrf"`
	User string `json:"user"`
	// Refused says why this login's last WebSocket was refused before
	// its upgrade (a session limit): a page cannot read a refused
	// upgrade's status, so it asks here.
	Refused string `json:"refused,omitempty"`
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	src := sourceAddr(r)
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		// a form post from another site cannot send JSON without a CORS
		// preflight, which this server never answers
		s.log.Warn("web login refused: not JSON", "content-type", r.Header.Get("Content-Type"), "source", src)
		writeError(w, http.StatusForbidden, "the login must be sent as application/json")
		return
	}
	// ReadHeaderTimeout bounds only the headers: a body sent a byte a
	// minute must not hold the connection (and its goroutine) before
	// anyone has logged in. The deadline goes once the body is read, so
	// that the connection's background read does not cancel the login
	// while PAM runs; on an error it stays, for the server's draining
	// of the body after the answer.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(loginBodyTimeout))
	var req loginRequest
	body := http.MaxBytesReader(w, r.Body, maxLoginBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil {
		_, err = io.Copy(io.Discard, body) // the rest (within the cap), under the deadline too
	}
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		// no detail: the error could quote the body, password and all
		writeError(w, http.StatusBadRequest, "the login must be a JSON object with user and password (at most 4 KiB)")
		return
	}
	defer func() { req.Password = "" }()

	select {
	case s.logins <- struct{}{}:
		defer func() { <-s.logins }()
	default:
		s.log.Warn("web login refused: too many logins in progress", "max", s.opts.MaxLogins, "source", src)
		writeError(w, http.StatusServiceUnavailable, "too many logins in progress: try again in a moment")
		return
	}
	if s.isClosing() {
		writeError(w, http.StatusServiceUnavailable, "the web terminal is shutting down")
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), loginTimeout)
	defer cancel()
	id, err := s.opts.Authenticator.Login(ctx, req.User, req.Password, auth.WebTTY(src))
	req.Password = ""
	if err != nil {
		s.loginRefused(w, src, err)
		return
	}
	l, cookie := s.newLogin(*id, src)
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: cookie, Path: "/",
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	s.log.Info("web login", "user", l.ident.User, "uid", l.ident.UID, "source", src, "login", l.id)
	s.mu.Lock()
	refused := l.refused
	s.mu.Unlock()
	writeJSONResponse(w, http.StatusOK, sessionResponse{CSRF: l.csrf, User: l.ident.User, Refused: refused})
}

// loginRefused answers a failed login. The typed user name is not logged
// here (it may be a password typed into the wrong field); the
// authenticator's audit log has the attempt.
func (s *Server) loginRefused(w http.ResponseWriter, src string, err error) {
	var rl *auth.RateLimitError
	switch {
	case errors.As(err, &rl):
		secs := max(int(math.Ceil(rl.RetryAfter.Seconds())), 1)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		s.log.Warn("web login refused: rate limited", "source", src, "retry-after", secs)
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("too many failed logins: try again in %d s", secs))
	case errors.Is(err, auth.ErrBadCredentials):
		s.log.Warn("web login refused: bad credentials", "source", src)
		// one answer for an unknown user and a wrong password
		writeError(w, http.StatusUnauthorized, "Login incorrect")
	case errors.Is(err, auth.ErrNotAdmin), errors.Is(err, auth.ErrAccount):
		// These come only once PAM has accepted the password: words of
		// their own would tell the network that the password was right.
		// The audit log and this log keep the reason; the consoles say it.
		reason := "not an admin"
		if errors.Is(err, auth.ErrAccount) {
			reason = "account refused"
		}
		s.log.Warn("web login refused: "+reason, "source", src)
		writeError(w, http.StatusUnauthorized, "Login incorrect")
	default:
		// the machinery failed (PAM stack, helper, user database): not
		// the operator's fault, and nothing to retry at once
		s.log.Error("web login failed", "source", src, "err", err)
		writeError(w, http.StatusServiceUnavailable, "login is unavailable on this host (PAM failed); the web terminal's log says why")
	}
}

// newLogin records a login for id from src and returns it with its
// cookie, which only the browser keeps.
func (s *Server) newLogin(id auth.Identity, src string) (*login, string) {
	cookie := randomToken()
	now := time.Now()
	l := &login{
		key:       cookieKey(cookie),
		id:        randomID(),
		ident:     id,
		source:    src,
		created:   s.opts.Now(),
		csrf:      randomToken(),
		start:     now,
		lastInput: now,
		kick:      make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	s.mu.Lock()
	s.sessions[l.key] = l
	s.mu.Unlock()
	go s.watchLogin(l)
	return l, cookie
}

// loginOf is the live login the request's cookie stands for, or nil.
func (s *Server) loginOf(r *http.Request) *login {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" || len(c.Value) > 100 {
		return nil
	}
	key := cookieKey(c.Value)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.sessions[key]
	if l == nil || l.ended {
		return nil
	}
	return l
}

func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	l := s.loginOf(r)
	if l == nil {
		writeError(w, http.StatusUnauthorized, "not logged in")
		return
	}
	s.mu.Lock()
	refused := l.refused
	s.mu.Unlock()
	writeJSONResponse(w, http.StatusOK, sessionResponse{CSRF: l.csrf, User: l.ident.User, Refused: refused})
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	l := s.loginOf(r)
	if l == nil {
		writeError(w, http.StatusUnauthorized, "not logged in")
		return
	}
	tok := r.Header.Get(CSRFHeader)
	if subtle.ConstantTimeCompare([]byte(tok), []byte(l.csrf)) != 1 {
		s.log.Warn("web logout refused: no or wrong CSRF token", "login", l.id, "source", sourceAddr(r))
		writeError(w, http.StatusForbidden, "missing or wrong "+CSRFHeader)
		return
	}
	s.endLogin(l, endLogout)
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: "", Path: "/", MaxAge: -1,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	w.WriteHeader(http.StatusNoContent)
}

// endLogin ends l for why: its cookie stops working at once, and each of
// its sessions is ended (close code, SIGHUP, reaped).
func (s *Server) endLogin(l *login, why endReason) {
	s.mu.Lock()
	if l.ended {
		s.mu.Unlock()
		return
	}
	l.ended = true
	delete(s.sessions, l.key)
	terms := append([]*terminal(nil), l.terms...)
	close(l.done)
	s.mu.Unlock()
	s.log.Info("web login ended", "user", l.ident.User, "source", l.source, "login", l.id, "reason", why.reason,
		"duration", time.Since(l.start).Round(time.Second).String())
	for _, t := range terms {
		s.endTerminal(t, why)
	}
}

// touch records input on l: the idle period starts again.
func (s *Server) touch(l *login) {
	s.mu.Lock()
	l.lastInput = time.Now()
	warned := l.warned
	l.warned = false
	s.mu.Unlock()
	if warned {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// watchLogin ends l when it has been idle for IdleTimeout (warning its
// sessions IdleWarning before) or lived for Lifetime.
func (s *Server) watchLogin(l *login) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-l.kick:
		case <-timer.C:
		}
		s.mu.Lock()
		now := time.Now()
		idleAt := l.lastInput.Add(s.opts.IdleTimeout)
		warnAt := idleAt.Add(-s.opts.IdleWarning)
		lifeAt := l.start.Add(s.opts.Lifetime)
		var warn []*terminal
		var end *endReason
		switch {
		case !now.Before(lifeAt):
			end = &endLifetime
		case !now.Before(idleAt):
			end = &endIdle
		case !now.Before(warnAt) && !l.warned:
			l.warned = true
			warn = append(warn, l.terms...)
		}
		next := earliest(lifeAt, idleAt)
		if !l.warned {
			next = earliest(next, warnAt)
		}
		s.mu.Unlock()
		if end != nil {
			s.endLogin(l, *end)
			return
		}
		for _, t := range warn {
			t.sendControl(s.ctx, controlMsg{T: "idle-warning", In: int(math.Ceil(time.Until(idleAt).Seconds()))})
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(time.Until(next), time.Millisecond))
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// cookieKey is what the login table keeps of a cookie.
func cookieKey(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

// randomToken is 32 random bytes, base64url without padding.
func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// randomID is a short random id for logs and console names.
func randomID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

type errorResponse struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSONResponse(w, code, errorResponse{Error: msg})
}

func writeJSONResponse(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
