package webterm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsClient is a browser's WebSocket: terminal output gathered, control
// frames queued, the close code once it ends.
type wsClient struct {
	t       *testing.T
	c       *websocket.Conn
	mu      sync.Mutex
	out     bytes.Buffer
	control chan controlMsg
	done    chan struct{}
	err     error // the read error that ended it
}

// dialWS opens /ws with cookie and origin; it returns the client, or nil
// and the HTTP status of the refused upgrade.
func (ts *testServer) dialWS(cookie, origin string, cols, rows int) (*wsClient, int) {
	ts.t.Helper()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	if cookie != "" {
		h.Set("Cookie", CookieName+"="+cookie)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := fmt.Sprintf("wss://%s/ws?cols=%d&rows=%d", ts.addr, cols, rows)
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: ts.client, HTTPHeader: h, Subprotocols: []string{Subprotocol},
	})
	if err != nil {
		if resp == nil {
			ts.t.Fatalf("dial %s: %v", u, err)
		}
		return nil, resp.StatusCode
	}
	if c.Subprotocol() != Subprotocol {
		ts.t.Errorf("subprotocol %q; want %q", c.Subprotocol(), Subprotocol)
	}
	w := &wsClient{t: ts.t, c: c, control: make(chan controlMsg, 16), done: make(chan struct{})}
	go w.read()
	ts.t.Cleanup(func() { c.CloseNow() })
	return w, resp.StatusCode
}

func (w *wsClient) read() {
	defer close(w.done)
	for {
		typ, data, err := w.c.Read(context.Background())
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			return
		}
		if typ == websocket.MessageBinary {
			w.mu.Lock()
			w.out.Write(data)
			w.mu.Unlock()
			continue
		}
		var m controlMsg
		if err := json.Unmarshal(data, &m); err != nil {
			w.t.Errorf("control frame %q: %v", data, err)
			continue
		}
		w.control <- m
	}
}

func (w *wsClient) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// waitOutput waits for the terminal output to match re and returns the
// first submatch (or the match).
func (w *wsClient) waitOutput(re string) string {
	w.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(w.output()); m != nil {
			return m[len(m)-1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.t.Fatalf("terminal output never matched %q; got:\n%s", re, w.output())
	return ""
}

func (w *wsClient) send(s string) {
	w.t.Helper()
	if err := w.c.Write(context.Background(), websocket.MessageBinary, []byte(s)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wsClient) sendControl(m controlMsg) {
	w.t.Helper()
	b, _ := json.Marshal(m)
	if err := w.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		w.t.Fatal(err)
	}
}

// closed waits for the server to end the WebSocket and returns its code.
func (w *wsClient) closed(within time.Duration) websocket.StatusCode {
	w.t.Helper()
	select {
	case <-w.done:
	case <-time.After(within):
		w.t.Fatalf("WebSocket still open after %v", within)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return websocket.CloseStatus(w.err)
}

// pid is the stand-in DCUI's process.
func (w *wsClient) pid() int {
	w.t.Helper()
	n, err := strconv.Atoi(w.waitOutput(`PID (\d+)`))
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// waitReaped waits until pid is gone: exited and reaped (a zombie still
// has its /proc entry).
func waitReaped(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	t.Fatalf("pid %d not reaped after %v: %s", pid, within, stat)
}

func (ts *testServer) sessionCode(cookie string) int {
	ts.t.Helper()
	resp := ts.do("GET", "/api/session", "", cookieHdr(cookie))
	body(ts.t, resp)
	return resp.StatusCode
}

// TestTerminal: the DCUI runs in a PTY of the browser's size, with its
// identity on fd 3 and nothing of the login in its argv or environment;
// keys reach it, its output comes back, a resize reaches the PTY.
func TestTerminal(t *testing.T) {
	ts := newTestServer(t, nil)
	cookie, _ := ts.login("alice")
	w, code := ts.dialWS(cookie, ts.origin(), 90, 20)
	if w == nil {
		t.Fatalf("dial: %d", code)
	}
	var id Identity
	if err := json.Unmarshal([]byte(w.waitOutput(`IDENT (\{.*\})`)), &id); err != nil {
		t.Fatal(err)
	}
	if id.User != "alice" || id.UID != 1000 || id.Source != "127.0.0.1" || !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(id.Session) {
		t.Errorf("identity %+v; want alice, uid 1000, from 127.0.0.1, a session id", id)
	}
	pid := w.pid()
	if got := w.waitOutput(`SIZE (\d+x\d+)`); got != "90x20" {
		t.Errorf("initial size %s; want 90x20 (from the query)", got)
	}

	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	for what, b := range map[string][]byte{"argv": cmdline, "environment": environ} {
		if bytes.Contains(b, []byte(testPassword)) || bytes.Contains(b, []byte(cookie)) {
			t.Errorf("the DCUI's %s holds the password or the cookie: %q", what, b)
		}
		if bytes.Contains(b, []byte("alice")) {
			t.Errorf("the DCUI's %s names the user (the identity goes on fd 3 only): %q", what, b)
		}
	}
	if args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"); len(args) < 3 || strings.Join(args[1:3], " ") != "--web-session-fd 3" {
		t.Errorf("argv %q; want the program, --web-session-fd 3, --root", args)
	}
	for _, kv := range strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00") {
		// the test's wrapper script sets the mode; os/exec adds PWD for Dir
		ok := strings.HasPrefix(kv, "VIRTCON_REEXEC=") || kv == "PWD=/"
		for _, want := range childEnv {
			ok = ok || kv == want
		}
		if !ok {
			t.Errorf("the DCUI's environment has %q; want PATH, TERM and LANG only", kv)
		}
	}

	w.send("hello web\r")
	w.waitOutput(`ECHO hello web`)
	w.sendControl(controlMsg{T: "resize", Cols: 132, Rows: 43})
	w.waitOutput(`SIZE 132x43`)
	w.sendControl(controlMsg{T: "resize", Cols: 9000, Rows: 0})
	w.waitOutput(`SIZE 500x1`)
	w.sendControl(controlMsg{T: "bogus"})
	w.c.Write(context.Background(), websocket.MessageText, []byte("not json"))
	w.send("still here\r")
	w.waitOutput(`ECHO still here`)

	// the sessions file lists it for virt webterm status
	list, err := ReadSessions(ts.layout, &Record{PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].User != "alice" || list[0].Source != "127.0.0.1" || list[0].PID != pid ||
		list[0].TTY != "web/"+id.Session || !list[0].Attached || !list[0].ReadOnly {
		t.Errorf("sessions %+v; want alice from 127.0.0.1 on web/%s, pid %d, attached, read-only (holds no console lock)", list, id.Session, pid)
	}
	if st, err := os.Stat(SessionsFile(ts.layout)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("sessions file: %v %v; want mode 0600", st.Mode(), err)
	}
	if other, _ := ReadSessions(ts.layout, &Record{PID: os.Getpid() + 1}); len(other) != 0 {
		t.Errorf("sessions of another server's record: %+v; want none", other)
	}
}

// TestWebSocketRefused: the upgrade is refused, before any DCUI starts,
// for another site's page, a name not served, or no login.
func TestWebSocketRefused(t *testing.T) {
	ts := newTestServer(t, nil)
	cookie, _ := ts.login("alice")
	port := ts.addr[strings.LastIndex(ts.addr, ":")+1:]
	tests := []struct {
		name, cookie, origin string
		code                 int
	}{
		{"another site", cookie, "https://evil.example", 403},
		{"another site on our port", cookie, "https://evil.example:" + port, 403},
		{"no origin", cookie, "", 403},
		{"plain http origin", cookie, "http://" + ts.addr, 403},
		{"origin with a path", cookie, ts.origin() + "/", 403},
		{"another port", cookie, "https://127.0.0.1:1", 403},
		{"another allowed name than Host", cookie, "https://localhost:" + port, 403},
		{"the string null", cookie, "null", 403},
		{"no cookie", "", ts.origin(), 401},
		{"forged cookie", randomToken(), ts.origin(), 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if w, code := ts.dialWS(tt.cookie, tt.origin, 80, 24); w != nil || code != tt.code {
				t.Errorf("dial: %d; want %d before the upgrade", code, tt.code)
			}
		})
	}
	if list, _ := ReadSessions(ts.layout, &Record{PID: os.Getpid()}); len(list) != 0 {
		t.Errorf("a refused upgrade started a session: %+v", list)
	}
	// a GET that is no upgrade at all: refused, and the login survives it
	hdr := cookieHdr(cookie)
	hdr["Origin"] = ts.origin()
	resp := ts.do("GET", "/ws", "", hdr)
	if b := body(t, resp); resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("GET /ws without an upgrade: %s %s; want 426", resp.Status, b)
	}
	if code := ts.sessionCode(cookie); code != 200 {
		t.Errorf("session after a failed upgrade: %d; want 200", code)
	}
	if w, code := ts.dialWS(cookie, ts.origin(), 80, 24); w == nil {
		t.Errorf("dial after a failed upgrade: %d; want 101", code)
	}
	if !strings.Contains(ts.logs.String(), "evil.example") {
		t.Error("a rejected Origin is not in the log")
	}
}

// TestSessionLimits: 2 sessions per user and 4 in all, refused with 503
// before the upgrade; a reattach does not count twice.
func TestSessionLimits(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.ReattachWindow = 10 * time.Second })
	open := func(user string) (*wsClient, string, int) {
		cookie, _ := ts.login(user)
		w, code := ts.dialWS(cookie, ts.origin(), 80, 24)
		return w, cookie, code
	}
	a1, a1cookie, _ := open("alice")
	open("alice")
	if w, _, code := open("alice"); w != nil || code != 503 {
		t.Errorf("alice's 3rd session: %d; want 503", code)
	}
	open("bob")
	open("bob")
	w5, rootCookie, code := open("root")
	if w5 != nil || code != 503 {
		t.Errorf("a 5th session in all: %d; want 503", code)
	}
	// the page cannot read a refused upgrade's status: /api/session says why
	resp := ts.do("GET", "/api/session", "", cookieHdr(rootCookie))
	if b := body(t, resp); resp.StatusCode != 200 || !strings.Contains(b, `"refused":"session limit: the web terminal has 4 sessions, its maximum"`) {
		t.Errorf("session after the refusal: %s %s; want 200 naming the limit", resp.Status, b)
	}
	// alice's first tab drops and comes back: the same DCUI, not a 5th
	pid := a1.pid()
	a1.c.CloseNow()
	time.Sleep(100 * time.Millisecond)
	w, code := ts.dialWS(a1cookie, ts.origin(), 80, 24)
	if w == nil {
		t.Fatalf("reattach at the limit: %d; want 101", code)
	}
	resp = ts.do("GET", "/api/session", "", cookieHdr(a1cookie))
	if b := body(t, resp); strings.Contains(b, "refused") {
		t.Errorf("session of a login whose WebSocket attached: %s; want no refusal", b)
	}
	w.send("pid\r")
	if got := w.pid(); got != pid {
		t.Errorf("reattached to pid %d; want the same DCUI, pid %d", got, pid)
	}
	if list, _ := ReadSessions(ts.layout, &Record{PID: os.Getpid()}); len(list) != 4 {
		t.Errorf("%d sessions listed; want 4", len(list))
	}
}

// TestIdleTimeout: a warning IdleWarning before, then close 4001; the
// cookie is dead and the DCUI reaped. Input starts the period again.
func TestIdleTimeout(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.IdleTimeout, o.IdleWarning = 1500*time.Millisecond, 1000*time.Millisecond })
	cookie, _ := ts.login("alice")
	w, _ := ts.dialWS(cookie, ts.origin(), 80, 24)
	pid := w.pid()
	select {
	case m := <-w.control:
		if m.T != "idle-warning" || m.In < 1 || m.In > 2 {
			t.Errorf("control %+v; want idle-warning in 1 s", m)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no idle warning")
	}
	// a key press after the warning: the session goes on
	w.send("awake\r")
	w.waitOutput(`ECHO awake`)
	time.Sleep(1200 * time.Millisecond) // past the first deadline
	if code := ts.sessionCode(cookie); code != 200 {
		t.Fatalf("session after input: %d; want 200 (input restarts the idle period)", code)
	}
	select {
	case m := <-w.control:
		if m.T != "idle-warning" {
			t.Errorf("control %+v; want a second idle-warning", m)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no second idle warning")
	}
	if code := w.closed(3 * time.Second); code != 4001 {
		t.Errorf("close code %d; want 4001", code)
	}
	if code := ts.sessionCode(cookie); code != 401 {
		t.Errorf("session after the idle timeout: %d; want 401", code)
	}
	waitReaped(t, pid, 10*time.Second)
}

func TestLifetime(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Lifetime = 800 * time.Millisecond })
	cookie, _ := ts.login("alice")
	w, _ := ts.dialWS(cookie, ts.origin(), 80, 24)
	pid := w.pid()
	for range 5 {
		w.send("busy\r") // input does not extend a lifetime
		time.Sleep(100 * time.Millisecond)
	}
	if code := w.closed(3 * time.Second); code != 4008 {
		t.Errorf("close code %d; want 4008", code)
	}
	if code := ts.sessionCode(cookie); code != 401 {
		t.Errorf("session after its lifetime: %d; want 401", code)
	}
	waitReaped(t, pid, 10*time.Second)
}

// TestReattach: a WebSocket that drops keeps its DCUI for the window; the
// same cookie gets it back (repainted: the PTY size changes and returns);
// after the window the DCUI is hung up and a new login is needed.
func TestReattach(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.ReattachWindow = 700 * time.Millisecond })
	cookie, _ := ts.login("alice")
	w, _ := ts.dialWS(cookie, ts.origin(), 80, 24)
	pid := w.pid()
	w.c.CloseNow()
	time.Sleep(200 * time.Millisecond)
	w2, code := ts.dialWS(cookie, ts.origin(), 80, 24)
	if w2 == nil {
		t.Fatalf("reattach: %d", code)
	}
	w2.send("pid\r") // the new client sees output from now on: ask
	if got := w2.pid(); got != pid {
		t.Errorf("reattached to pid %d; want the same DCUI, pid %d", got, pid)
	}
	w2.waitOutput(`SIZE 80x23[\s\S]*SIZE 80x24`) // the repaint
	// a clean close by the browser (a reload) detaches the same way
	w2.c.Close(websocket.StatusGoingAway, "reload")
	time.Sleep(1500 * time.Millisecond)
	waitReaped(t, pid, 10*time.Second)
	if code := ts.sessionCode(cookie); code != 401 {
		t.Errorf("session after the reattach window: %d; want 401 (a new login)", code)
	}
	if w, code := ts.dialWS(cookie, ts.origin(), 80, 24); w != nil || code != 401 {
		t.Errorf("WebSocket after the window: %d; want 401", code)
	}
}

// TestLogoutEndsSession: logout closes the WebSocket with 4003 and hangs
// up the DCUI, which is reaped; one that ignores SIGHUP is killed.
func TestLogoutEndsSession(t *testing.T) {
	old := hangupGrace
	hangupGrace = 500 * time.Millisecond
	t.Cleanup(func() { hangupGrace = old })
	ts := newTestServer(t, nil)
	for _, user := range []string{"alice", "hupproof"} {
		t.Run(user, func(t *testing.T) {
			cookie, csrf := ts.login(user)
			w, _ := ts.dialWS(cookie, ts.origin(), 80, 24)
			pid := w.pid()
			hdr := cookieHdr(cookie)
			hdr[CSRFHeader] = csrf
			if resp := ts.do("POST", "/api/logout", "", hdr); resp.StatusCode != 204 {
				t.Fatalf("logout: %s", resp.Status)
			}
			if code := w.closed(3 * time.Second); code != 4003 {
				t.Errorf("close code %d; want 4003", code)
			}
			waitReaped(t, pid, 5*time.Second)
		})
	}
	if !strings.Contains(ts.logs.String(), "killing it") {
		t.Error("the DCUI that ignored SIGHUP was not reported killed")
	}
}

// TestDCUIExit: quitting the DCUI ends its session: an exit message, a
// normal close, and (its login's last session) the login.
func TestDCUIExit(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, tc := range []struct {
		line, reason string
	}{
		{"quit", "the DCUI exited"},
		{"crash", "exit status 3"},
	} {
		cookie, _ := ts.login("alice")
		w, _ := ts.dialWS(cookie, ts.origin(), 80, 24)
		pid := w.pid()
		w.send(tc.line + "\r")
		select {
		case m := <-w.control:
			if m.T != "exit" || !strings.Contains(m.Reason, tc.reason) {
				t.Errorf("%s: control %+v; want exit saying %q", tc.line, m, tc.reason)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no exit message", tc.line)
		}
		if code := w.closed(3 * time.Second); code != websocket.StatusNormalClosure {
			t.Errorf("%s: close code %d; want 1000", tc.line, code)
		}
		waitReaped(t, pid, 5*time.Second)
		if code := ts.sessionCode(cookie); code != 401 {
			t.Errorf("%s: session after the DCUI exited: %d; want 401", tc.line, code)
		}
	}
	// the server carries on
	cookie, _ := ts.login("bob")
	if w, code := ts.dialWS(cookie, ts.origin(), 80, 24); w == nil {
		t.Errorf("a new session after one crashed: %d", code)
	}
}

// TestShutdown: the end of Serve's context tells every browser, hangs up
// and reaps every DCUI, and removes the sessions file.
func TestShutdown(t *testing.T) {
	ts := newTestServer(t, nil)
	var pids []int
	var clients []*wsClient
	for _, u := range []string{"alice", "bob"} {
		cookie, _ := ts.login(u)
		w, _ := ts.dialWS(cookie, ts.origin(), 80, 24)
		pids = append(pids, w.pid())
		clients = append(clients, w)
	}
	if err := ts.stop(); err != nil {
		t.Errorf("Serve: %v; want nil after its context ended", err)
	}
	for _, w := range clients {
		select {
		case m := <-w.control:
			if m.T != "exit" {
				t.Errorf("control %+v; want exit", m)
			}
		case <-time.After(time.Second):
			t.Error("no exit message at shutdown")
		}
		if code := w.closed(3 * time.Second); code != websocket.StatusGoingAway {
			t.Errorf("close code %d; want 1001", code)
		}
	}
	for _, pid := range pids {
		waitReaped(t, pid, time.Second) // Serve returned: already reaped
	}
	if _, err := os.Stat(SessionsFile(ts.layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sessions file after shutdown: %v; want removed", err)
	}
}

// rawUpgrade sends one upgrade request for /ws over its own TLS
// connection, with host as the Host header and hdr on top of a good
// browser's headers ("" deletes one), and returns the response's status
// and its Sec-WebSocket-Protocol. A 101 leaves the connection to the
// test's end.
func (ts *testServer) rawUpgrade(method, host string, hdr map[string]string) (int, string) {
	ts.t.Helper()
	conn, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: ts.pool, ServerName: "localhost"})
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(func() { conn.Close() })
	h := map[string]string{
		"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": Subprotocol,
	}
	maps.Copy(h, hdr)
	var b strings.Builder
	fmt.Fprintf(&b, "%s /ws?cols=80&rows=24 HTTP/1.1\r\nHost: %s\r\n", method, host)
	for k, v := range h {
		if v != "" {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, b.String()); err != nil {
		ts.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		ts.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
	}
	return resp.StatusCode, resp.Header.Get("Sec-WebSocket-Protocol")
}

// TestUpgradeBehindProxy: the Host a reverse proxy sends, with or without
// the port 443 the browser's Origin leaves out, upgrades (101), through
// the real handler and websocket.Accept.
func TestUpgradeBehindProxy(t *testing.T) {
	ts := newTestServer(t, func(o *Options) {
		o.AllowHosts = append(o.AllowHosts, "console.example.org")
		o.MaxPerUser = 4
	})
	cookie, _ := ts.login("alice")
	for _, host := range []string{"console.example.org:443", "console.example.org", "Console.Example.Org:443"} {
		t.Run(host, func(t *testing.T) {
			code, proto := ts.rawUpgrade("GET", host, map[string]string{
				"Origin": "https://console.example.org", "Cookie": CookieName + "=" + cookie,
			})
			if code != http.StatusSwitchingProtocols || proto != Subprotocol {
				t.Errorf("Host %s, Origin https://console.example.org: %d %q; want 101 %s", host, code, proto, Subprotocol)
			}
		})
	}
	// the port the Origin names must still be Host's
	code, _ := ts.rawUpgrade("GET", "console.example.org:8443", map[string]string{
		"Origin": "https://console.example.org", "Cookie": CookieName + "=" + cookie,
	})
	if code != http.StatusForbidden {
		t.Errorf("Host console.example.org:8443, Origin without a port: %d; want 403", code)
	}
}

// TestRefusedUpgradeStartsNoDCUI: what websocket.Accept would refuse is
// refused before a DCUI starts for it.
func TestRefusedUpgradeStartsNoDCUI(t *testing.T) {
	ts := newTestServer(t, nil)
	cookie, _ := ts.login("alice")
	base := map[string]string{"Origin": ts.origin(), "Cookie": CookieName + "=" + cookie}
	tests := []struct {
		name, method string
		hdr          map[string]string
		code         int
	}{
		{"HEAD", "HEAD", nil, 405},
		{"version 8", "GET", map[string]string{"Sec-WebSocket-Version": "8"}, 400},
		{"no version", "GET", map[string]string{"Sec-WebSocket-Version": ""}, 400},
		{"no subprotocol", "GET", map[string]string{"Sec-WebSocket-Protocol": ""}, 400},
		{"another subprotocol", "GET", map[string]string{"Sec-WebSocket-Protocol": "chat, superchat"}, 400},
		{"bad key", "GET", map[string]string{"Sec-WebSocket-Key": "c2hvcnQ="}, 400},
		{"no Connection: Upgrade", "GET", map[string]string{"Connection": "keep-alive"}, 426},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := maps.Clone(base)
			maps.Copy(h, tt.hdr)
			if code, _ := ts.rawUpgrade(tt.method, ts.addr, h); code != tt.code {
				t.Errorf("%d; want %d", code, tt.code)
			}
		})
	}
	if strings.Contains(ts.logs.String(), "web session start") {
		t.Errorf("a refused upgrade started a DCUI; log:\n%s", ts.logs.String())
	}
	// a subprotocol among others is fine
	h := maps.Clone(base)
	h["Sec-WebSocket-Protocol"] = "chat, " + Subprotocol
	if code, proto := ts.rawUpgrade("GET", ts.addr, h); code != 101 || proto != Subprotocol {
		t.Errorf("offering chat and ours: %d %q; want 101 %s", code, proto, Subprotocol)
	}
}

// TestLogoutInDCUIEndsLogin: a DCUI that exits with ExitLoggedOut (its
// user logged out or locked) ends the whole login: every tab closed with
// 4003, every DCUI reaped, the cookie dead. A plain quit in one tab of
// two ends that tab only.
func TestLogoutInDCUIEndsLogin(t *testing.T) {
	ts := newTestServer(t, nil)
	cookie, _ := ts.login("alice")
	a, _ := ts.dialWS(cookie, ts.origin(), 80, 24)
	b, _ := ts.dialWS(cookie, ts.origin(), 80, 24)
	if a == nil || b == nil {
		t.Fatal("two tabs: a WebSocket refused")
	}
	pa, pb := a.pid(), b.pid()
	a.send("logout\r")
	for i, w := range []*wsClient{a, b} {
		if code := w.closed(5 * time.Second); code != 4003 {
			t.Errorf("tab %d: close code %d; want 4003 (logged out)", i+1, code)
		}
	}
	waitReaped(t, pa, 5*time.Second)
	waitReaped(t, pb, 5*time.Second)
	if code := ts.sessionCode(cookie); code != 401 {
		t.Errorf("session after the logout in the DCUI: %d; want 401", code)
	}
	if w, code := ts.dialWS(cookie, ts.origin(), 80, 24); w != nil || code != 401 {
		t.Errorf("a WebSocket after the logout in the DCUI: %d; want 401", code)
	}

	cookie, _ = ts.login("bob")
	a, _ = ts.dialWS(cookie, ts.origin(), 80, 24)
	b, _ = ts.dialWS(cookie, ts.origin(), 80, 24)
	a.pid()
	b.pid()
	a.send("quit\r")
	if code := a.closed(5 * time.Second); code != websocket.StatusNormalClosure {
		t.Errorf("quit: close code %d; want 1000", code)
	}
	if code := ts.sessionCode(cookie); code != 200 {
		t.Errorf("session after quitting one tab of two: %d; want 200", code)
	}
	b.send("pid\r")
	select {
	case <-b.done:
		t.Error("the other tab ended with a quit in the first")
	case <-time.After(200 * time.Millisecond):
	}
}
