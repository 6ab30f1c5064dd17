package webterm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Subprotocol is the WebSocket subprotocol of the page's terminal:
// binary frames carry terminal bytes both ways, text frames JSON control
// (controlMsg).
const Subprotocol = "virtcon.webterm.v1"

const (
	readLimit = 64 << 10
	pingEvery = 20 * time.Second
	// maxDim bounds a terminal's columns and rows.
	maxDim                   = 500
	defaultCols, defaultRows = 80, 24
	statusServiceUnavailable = http.StatusServiceUnavailable
)

// errLimit is a session refused by MaxSessions or MaxPerUser.
var errLimit = errors.New("session limit")

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	src := sourceAddr(r)
	// GET is a safe method to CrossOriginProtection: the upgrade checks
	// the Origin itself, exactly, before anything else (cross-site
	// WebSocket hijacking)
	if err := s.checkOrigin(r); err != nil {
		s.log.Warn("web terminal: WebSocket refused: origin", "origin", r.Header.Get("Origin"), "host", r.Host, "source", src, "err", err)
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	l := s.loginOf(r)
	if l == nil {
		writeError(w, http.StatusUnauthorized, "not logged in")
		return
	}
	if s.isClosing() {
		writeError(w, statusServiceUnavailable, "the web terminal is shutting down")
		return
	}
	if code, err := checkUpgrade(w, r); err != nil {
		// no DCUI is started for what cannot become a WebSocket:
		// everything websocket.Accept would refuse is refused here first
		s.log.Warn("web terminal: WebSocket refused: not an upgrade we accept", "source", src, "err", err)
		writeError(w, code, err.Error())
		return
	}
	cols, rows := sizeParam(r.URL.Query().Get("cols"), defaultCols), sizeParam(r.URL.Query().Get("rows"), defaultRows)
	t, reattached, err := s.terminalFor(l, cols, rows)
	switch {
	case errors.Is(err, errLimit):
		s.log.Warn("web terminal: session refused", "user", l.ident.User, "source", src, "err", err)
		s.mu.Lock()
		l.refused = err.Error()
		s.mu.Unlock()
		writeError(w, statusServiceUnavailable, err.Error())
		return
	case err != nil:
		s.log.Error("web terminal: session not started", "user", l.ident.User, "source", src, "err", err)
		writeError(w, http.StatusInternalServerError, "the DCUI could not be started; the web terminal's log says why")
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{Subprotocol},
		// checkOrigin has run: an exact https Origin on an allowed name
		// for this Host, a missing port taken as 443. Accept's own check
		// compares Host and the Origin's host as strings, so a proxy's
		// "Host: name:443" against "Origin: https://name" would get 403.
		InsecureSkipVerify: true,
	})
	if err != nil {
		s.log.Warn("web terminal: WebSocket upgrade failed", "source", src, "err", err)
		s.unclaim(t, reattached)
		return
	}
	c.SetReadLimit(readLimit)
	if !s.attach(t, c) {
		// ended between the claim and now (logout, idle)
		_ = c.Close(websocket.StatusGoingAway, "session ended")
		return
	}
	s.mu.Lock()
	l.refused = ""
	s.mu.Unlock()
	s.writeSessions()
	if reattached {
		s.log.Info("web session reattached", "session", t.id, "user", l.ident.User, "source", src)
		go t.repaint(cols, rows)
	}
	s.serveConn(l, t, c)
}

// serveConn reads the browser's frames until its WebSocket ends, then
// detaches it (the session waits ReattachWindow for another).
func (s *Server) serveConn(l *login, t *terminal, c *websocket.Conn) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		tick := time.NewTicker(pingEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				pctx, pcancel := context.WithTimeout(ctx, writeTimeout)
				err := c.Ping(pctx)
				pcancel()
				if err != nil && ctx.Err() == nil {
					_ = c.CloseNow() // the read below fails: detach
					return
				}
			}
		}
	}()
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			break
		}
		switch typ {
		case websocket.MessageBinary:
			s.touch(l)
			_ = t.write(data) // fails only once the DCUI is gone: reap tells the browser
		case websocket.MessageText:
			s.control(t, data)
		}
	}
	s.detachConn(t, c)
}

// control handles a JSON control frame from the browser.
func (s *Server) control(t *terminal, data []byte) {
	var m controlMsg
	if err := json.Unmarshal(data, &m); err != nil {
		s.log.Debug("web session: control frame not JSON; ignored", "session", t.id)
		return
	}
	switch m.T {
	case "resize":
		cols, rows := clampDim(m.Cols), clampDim(m.Rows)
		if err := t.resize(cols, rows); err != nil {
			s.log.Debug("web session: resize", "session", t.id, "err", err)
		}
	default:
		s.log.Debug("web session: unknown control frame; ignored", "session", t.id, "t", m.T)
	}
}

// terminalFor is the session a WebSocket of l gets: its detached one if
// it has one (reattached), else a new DCUI when the limits allow it. The
// session returned is claimed: no other WebSocket gets it meanwhile.
func (s *Server) terminalFor(l *login, cols, rows int) (t *terminal, reattached bool, err error) {
	// one start at a time, so that two WebSockets at once cannot both
	// pass the limits
	s.startMu.Lock()
	defer s.startMu.Unlock()
	s.mu.Lock()
	if l.ended {
		s.mu.Unlock()
		return nil, false, fmt.Errorf("%w: logged out", errLimit)
	}
	for _, x := range l.terms {
		if x.conn == nil && !x.claimed && !x.ending && !x.finished {
			x.claimed = true
			if x.detach != nil {
				x.detach.Stop()
				x.detach = nil
			}
			s.mu.Unlock()
			return x, true, nil
		}
	}
	total, mine := 0, 0
	for _, o := range s.sessions {
		total += len(o.terms)
		if o.ident.User == l.ident.User {
			mine += len(o.terms)
		}
	}
	s.mu.Unlock()
	switch {
	case total >= s.opts.MaxSessions:
		return nil, false, fmt.Errorf("%w: the web terminal has %d sessions, its maximum", errLimit, total)
	case mine >= s.opts.MaxPerUser:
		return nil, false, fmt.Errorf("%w: %s has %d sessions, the maximum per user", errLimit, l.ident.User, mine)
	}
	t, err = s.startTerminal(l, cols, rows)
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	t.claimed = true
	l.terms = append(l.terms, t)
	ended := l.ended
	s.mu.Unlock()
	s.writeSessions()
	if ended {
		s.endTerminal(t, endLogout)
		return nil, false, fmt.Errorf("%w: logged out", errLimit)
	}
	return t, false, nil
}

// unclaim gives back a session claimed for a WebSocket whose upgrade
// failed: a reattached one waits out its window again, a new one ends.
func (s *Server) unclaim(t *terminal, reattached bool) {
	if !reattached {
		s.endTerminal(t, endWindow)
		return
	}
	s.mu.Lock()
	t.claimed = false
	if !t.ending && !t.finished && t.conn == nil {
		t.detach = time.AfterFunc(s.opts.ReattachWindow, func() { s.endTerminal(t, endWindow) })
	}
	s.mu.Unlock()
}

// checkUpgrade refuses, with its status, a request that
// websocket.Accept would refuse (and that Accept would refuse only after
// a DCUI was started for it), and one that does not offer Subprotocol.
func checkUpgrade(w http.ResponseWriter, r *http.Request) (int, error) {
	switch {
	case !r.ProtoAtLeast(1, 1):
		return http.StatusUpgradeRequired, fmt.Errorf("%s: want HTTP/1.1 for a WebSocket upgrade", r.Proto)
	case !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket"):
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		return http.StatusUpgradeRequired, errors.New("want a WebSocket upgrade")
	case r.Method != http.MethodGet:
		// (the route's GET also matches HEAD)
		return http.StatusMethodNotAllowed, fmt.Errorf("method %s: want GET for a WebSocket upgrade", r.Method)
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		w.Header().Set("Sec-WebSocket-Version", "13")
		return http.StatusBadRequest, fmt.Errorf("WebSocket version %q: want 13", trim(r.Header.Get("Sec-WebSocket-Version")))
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return http.StatusBadRequest, fmt.Errorf("%d Sec-WebSocket-Key headers: want one", len(keys))
	}
	if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(k) != 16 {
		return http.StatusBadRequest, errors.New("the key in Sec-WebSocket-Key: want 16 bytes in base64")
	}
	if !headerHasToken(r.Header, "Sec-WebSocket-Protocol", Subprotocol) {
		return http.StatusBadRequest, fmt.Errorf("subprotocols %q: want %s", trim(strings.Join(r.Header.Values("Sec-WebSocket-Protocol"), ", ")), Subprotocol)
	}
	return 0, nil
}

// headerHasToken says whether the comma-separated values of header name
// hold token (compared without case).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// checkOrigin requires the Origin of a browser on one of the allowed
// names, over https, for the very host and port it asked for (Host):
// "https://" + Host. A page of another site, or one reached through a
// name this host does not serve, is refused.
func (s *Server) checkOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return errors.New("no Origin header")
	}
	u, err := url.Parse(o)
	if err != nil || u.Scheme != "https" || u.Host == "" || o != "https://"+u.Host {
		return fmt.Errorf("origin %q: want https://HOST[:PORT]", trim(o))
	}
	if !s.allowed(r, u.Hostname()) {
		return fmt.Errorf("origin %q: not a name this server serves", trim(o))
	}
	if !sameHostPort(u.Host, r.Host) {
		return fmt.Errorf("origin %q: another site than %s", trim(o), quoteHost(r.Host))
	}
	return nil
}

// sameHostPort compares two host[:port]s of https URLs: the names and
// addresses canonically, a missing port as 443.
func sameHostPort(a, b string) bool {
	ha, pa := splitHTTPS(a)
	hb, pb := splitHTTPS(b)
	return ha != "" && ha == hb && pa == pb
}

func splitHTTPS(hp string) (host, port string) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		h, p = hp, "443"
	}
	return canonicalHost(h), p
}

func trim(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}

// sizeParam is a size from the query, clamped; def when absent or bad.
func sizeParam(v string, def int) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		return def
	}
	return clampDim(n)
}

func clampDim(n int) int { return min(max(n, 1), maxDim) }
