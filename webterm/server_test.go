package webterm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/internal/reexec"
	"github.com/virtcon/virtcon/paths"
)

// TestMain: the stand-in DCUI is this test binary re-executed.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

const fakeDCUIMode = "webterm-test-dcui"

func init() { reexec.Register(fakeDCUIMode, fakeDCUI) }

// fakeDCUI stands in for the dcui program: it reads its identity as the
// DCUI does, then reports it, its PID and its terminal's size (again on
// every SIGWINCH), and answers each input line: "quit" exits 0, "crash"
// exits 3, "logout" exits ExitLoggedOut (F12/x in a web session's DCUI),
// "pid" prints the PID again, anything else is echoed. A user "hupproof"
// ignores SIGHUP.
func fakeDCUI() int {
	if len(os.Args) < 3 || os.Args[1] != "--web-session-fd" || os.Args[2] != "3" {
		fmt.Printf("BADARGS %q\n", os.Args[1:])
		return 2
	}
	id, err := ReadIdentity(os.NewFile(3, "identity"))
	if err != nil {
		fmt.Printf("IDENT-ERROR %v\n", err)
		return 2
	}
	if id.User == "hupproof" {
		signal.Ignore(syscall.SIGHUP)
	}
	b, _ := json.Marshal(id)
	fmt.Printf("IDENT %s\n", b)
	fmt.Printf("PID %d\n", os.Getpid())
	var mu sync.Mutex
	size := func() {
		mu.Lock()
		defer mu.Unlock()
		ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
		if err != nil {
			fmt.Printf("SIZE-ERROR %v\n", err)
			return
		}
		fmt.Printf("SIZE %dx%d\n", ws.Col, ws.Row)
	}
	size()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		for range winch {
			size()
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch line := strings.TrimSpace(sc.Text()); line {
		case "quit":
			return 0
		case "crash":
			return 3
		case "logout":
			return ExitLoggedOut
		case "pid":
			fmt.Printf("PID %d\n", os.Getpid())
		default:
			fmt.Printf("ECHO %s\n", line)
		}
	}
	return 0
}

const testPassword = "Sw0rdfish-tEst-pw-91"

// fakeAuth answers like auth.Authenticator over a small table. A login
// of "slow" blocks until release is closed or its context ends.
type fakeAuth struct {
	mu      sync.Mutex
	ttys    []string
	release chan struct{}
	entered chan struct{} // a slow login is in progress
}

func newFakeAuth() *fakeAuth {
	return &fakeAuth{release: make(chan struct{}), entered: make(chan struct{}, 8)}
}

var testUsers = map[string]int{"alice": 1000, "bob": 1001, "carol": 1002, "root": 0, "hupproof": 1003, "slow": 1004}

func (f *fakeAuth) Login(ctx context.Context, user, password, tty string) (*auth.Identity, error) {
	f.mu.Lock()
	f.ttys = append(f.ttys, tty)
	f.mu.Unlock()
	switch user {
	case "limited":
		return nil, fmt.Errorf("login: %w", &auth.RateLimitError{RetryAfter: 4500 * time.Millisecond})
	case "broken":
		return nil, errors.New("login: pam helper: no answer (killed)")
	case "carol":
		if password == testPassword {
			return nil, fmt.Errorf("login %q: %w: not root and not a member of group %q", user, auth.ErrNotAdmin, "virtcon-admin")
		}
	case "expired":
		if password == testPassword {
			return nil, fmt.Errorf("login %q: %w: User account has expired", user, auth.ErrAccount)
		}
	case "slow":
		f.entered <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	uid, ok := testUsers[user]
	if !ok || password != testPassword {
		return nil, fmt.Errorf("login: %w", auth.ErrBadCredentials)
	}
	return &auth.Identity{User: user, UID: uid, Groups: []string{"users", "virtcon-admin"}}, nil
}

func (f *fakeAuth) TTYs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ttys...)
}

// syncBuffer is a log sink the server's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type testServer struct {
	t      *testing.T
	srv    *Server
	auth   *fakeAuth
	layout paths.Layout
	logs   *syncBuffer
	addr   string // 127.0.0.1:port
	client *http.Client
	pool   *x509.CertPool
	cancel context.CancelFunc
	served chan error
}

// testCert is a self-signed certificate for localhost and 127.0.0.1.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "virtcon test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// fakeDCUIScript is a dcui program that runs fakeDCUI: the server gives
// its DCUI a clean environment, so the mode marker is set here.
func fakeDCUIScript(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dcui")
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=%s %s \"$@\"\n", reexec.Env, fakeDCUIMode, self)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

var testStatic = fstest.MapFS{
	"index.html": {Data: []byte("<!doctype html><title>virtcon</title><div id=terminal></div>\n")},
	"app.js":     {Data: []byte("export {};\n")},
}

// newTestServer serves a Server with the fake authenticator and DCUI on
// 127.0.0.1 over real TLS until the test ends.
func newTestServer(t *testing.T, change func(*Options)) *testServer {
	t.Helper()
	cert, pool := testCert(t)
	ts := &testServer{t: t, auth: newFakeAuth(), layout: paths.New(t.TempDir()), logs: &syncBuffer{}, pool: pool}
	opts := Options{
		Layout:        ts.layout,
		Logger:        slog.New(slog.NewJSONHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Certificate:   cert,
		Static:        testStatic,
		AllowHosts:    []string{"localhost", "127.0.0.1"},
		Authenticator: ts.auth,
		DCUI:          fakeDCUIScript(t),
	}
	if change != nil {
		change(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	ts.served = make(chan error, 1)
	go func() { ts.served <- srv.Serve(ctx, ln) }()
	ts.client = &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	t.Cleanup(func() {
		ts.stop()
		if t.Failed() {
			t.Logf("server log:\n%s", ts.logs.String())
		}
	})
	return ts
}

// stop shuts the server down and waits for Serve (and every DCUI).
func (ts *testServer) stop() error {
	ts.cancel()
	select {
	case err, ok := <-ts.served:
		if ok {
			close(ts.served)
		}
		return err
	case <-time.After(15 * time.Second):
		ts.t.Error("Serve did not return within 15 s of the end of its context")
		return nil
	}
}

func (ts *testServer) url(path string) string { return "https://" + ts.addr + path }

func (ts *testServer) origin() string { return "https://" + ts.addr }

// do sends a request with the browser's usual same-origin headers.
func (ts *testServer) do(method, path, body string, hdr map[string]string) *http.Response {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url(path), strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Origin", ts.origin())
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	return resp
}

// body reads and closes resp's body.
func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func loginBody(user, password string) string {
	b, _ := json.Marshal(loginRequest{User: user, Password: password})
	return string(b)
}

// login logs user in and returns the cookie's value and the CSRF token.
func (ts *testServer) login(user string) (cookie, csrf string) {
	ts.t.Helper()
	resp := ts.do("POST", "/api/login", loginBody(user, testPassword), nil)
	b := body(ts.t, resp)
	if resp.StatusCode != http.StatusOK {
		ts.t.Fatalf("login %s: %s %s", user, resp.Status, b)
	}
	var sr sessionResponse
	if err := json.Unmarshal([]byte(b), &sr); err != nil {
		ts.t.Fatal(err)
	}
	for _, c := range resp.Cookies() {
		if c.Name == CookieName {
			return c.Value, sr.CSRF
		}
	}
	ts.t.Fatalf("login %s: no %s cookie", user, CookieName)
	return "", ""
}

func cookieHdr(v string) map[string]string { return map[string]string{"Cookie": CookieName + "=" + v} }

func TestLogin(t *testing.T) {
	ts := newTestServer(t, nil)
	resp := ts.do("POST", "/api/login", loginBody("alice", testPassword), nil)
	b := body(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login: %s %s; want 200", resp.Status, b)
	}
	var sr sessionResponse
	dec := json.NewDecoder(strings.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sr); err != nil || sr.User != "alice" {
		t.Errorf("login answer %q (%v); want {csrf, user: alice}", b, err)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(sr.CSRF); err != nil || len(raw) != 32 {
		t.Errorf("csrf %q: want 32 random bytes in base64url", sr.CSRF)
	}
	sc := resp.Header.Values("Set-Cookie")
	if len(sc) != 1 {
		t.Fatalf("Set-Cookie %q; want one cookie", sc)
	}
	name, rest, _ := strings.Cut(sc[0], "=")
	value, attrs, _ := strings.Cut(rest, ";")
	if name != CookieName {
		t.Errorf("cookie name %q; want %q", name, CookieName)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(value); err != nil || len(raw) != 32 {
		t.Errorf("cookie value %q: want 32 random bytes in base64url", value)
	}
	if want := " Path=/; HttpOnly; Secure; SameSite=Strict"; attrs != want {
		t.Errorf("cookie attributes %q; want exactly %q (no Domain, no expiry)", attrs, want)
	}
	if strings.Contains(ts.logs.String(), value) {
		t.Error("the cookie is in the server's log")
	}
	if got := ts.auth.TTYs(); len(got) != 1 || got[0] != "web:127.0.0.1" {
		t.Errorf("authenticator got ttys %q; want [web:127.0.0.1]", got)
	}

	tests := []struct {
		name, user, password string
		code                 int
		want                 string
	}{
		{"wrong password", "alice", "nope", 401, `{"error":"Login incorrect"}`},
		{"unknown user", "nobody", "nope", 401, `{"error":"Login incorrect"}`},
		// the right password of an account that may not log in gets the
		// same answer: other words would confirm the password
		{"not an admin", "carol", testPassword, 401, `{"error":"Login incorrect"}`},
		{"account refused", "expired", testPassword, 401, `{"error":"Login incorrect"}`},
		{"rate limited", "limited", "x", 429, "try again in 5 s"},
		{"PAM broken", "broken", "x", 503, "login is unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.do("POST", "/api/login", loginBody(tt.user, tt.password), nil)
			b := body(t, resp)
			if resp.StatusCode != tt.code || !strings.Contains(b, tt.want) {
				t.Errorf("%s %s; want %d %s", resp.Status, b, tt.code, tt.want)
			}
			if c := resp.Header.Get("Set-Cookie"); c != "" {
				t.Errorf("refused login set a cookie: %q", c)
			}
			if tt.code == 429 && resp.Header.Get("Retry-After") != "5" {
				t.Errorf("Retry-After %q; want 5", resp.Header.Get("Retry-After"))
			}
		})
	}
	// the server's log keeps the reasons the answers leave out
	for _, w := range []string{"web login refused: not an admin", "web login refused: account refused"} {
		if !strings.Contains(ts.logs.String(), w) {
			t.Errorf("the server's log lacks %q", w)
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		code         int
		noStore      bool
	}{
		{"GET", "/", nil, 200, false},
		{"GET", "/app.js", nil, 200, false},
		{"GET", "/api/session", nil, 401, true},
		{"POST", "/api/login", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, true},
		{"GET", "/", map[string]string{"Host": "evil.example"}, 421, false},
	} {
		resp := ts.do(tc.method, tc.path, "{}", tc.hdr)
		body(t, resp)
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %s; want %d", tc.method, tc.path, resp.Status, tc.code)
		}
		for k, v := range map[string]string{
			"Content-Security-Policy":   contentSecurityPolicy,
			"X-Content-Type-Options":    "nosniff",
			"Referrer-Policy":           "no-referrer",
			"Strict-Transport-Security": "max-age=31536000",
		} {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s %s (%d): %s %q; want %q", tc.method, tc.path, resp.StatusCode, k, got, v)
			}
		}
		if cc := resp.Header.Get("Cache-Control"); tc.noStore != (cc == "no-store") {
			t.Errorf("%s %s: Cache-Control %q; want no-store only on /api", tc.method, tc.path, cc)
		}
	}
	if !strings.Contains(contentSecurityPolicy, "default-src 'self'") || !strings.Contains(contentSecurityPolicy, "frame-ancestors 'none'") ||
		strings.Contains(contentSecurityPolicy, "script-src") || strings.Contains(contentSecurityPolicy, "unsafe") {
		t.Errorf("CSP %q: want default-src 'self', frame-ancestors 'none', nothing unsafe", contentSecurityPolicy)
	}
}

// TestCrossSiteLogin: what a page of another site can send is refused
// before the authenticator is asked.
func TestCrossSiteLogin(t *testing.T) {
	ts := newTestServer(t, nil)
	good := loginBody("alice", testPassword)
	tests := []struct {
		name string
		hdr  map[string]string
		body string
		code int
	}{
		{"text/plain", map[string]string{"Content-Type": "text/plain"}, good, 403},
		{"form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "user=alice&password=" + testPassword, 403},
		{"no content type", map[string]string{"Content-Type": ""}, good, 403},
		{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, good, 403},
		{"Origin of another site", map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}, good, 403},
		{"Host not served", map[string]string{"Host": "rebind.evil.example:8443"}, good, 421},
		{"body too big", nil, `{"user":"alice","password":"` + strings.Repeat("x", 5000) + `"}`, 400},
		{"unknown field", nil, `{"user":"alice","password":"x","admin":true}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ts.do("POST", "/api/login", tt.body, tt.hdr)
			b := body(t, resp)
			if resp.StatusCode != tt.code {
				t.Errorf("%s %s; want %d", resp.Status, b, tt.code)
			}
			if resp.Header.Get("Set-Cookie") != "" {
				t.Error("refused request set a cookie")
			}
		})
	}
	if n := len(ts.auth.TTYs()); n != 0 {
		t.Errorf("authenticator asked %d times; want never", n)
	}
}

func TestSessionAndLogout(t *testing.T) {
	ts := newTestServer(t, nil)
	cookie, csrf := ts.login("alice")

	resp := ts.do("GET", "/api/session", "", cookieHdr(cookie))
	if b := body(t, resp); resp.StatusCode != 200 || !strings.Contains(b, `"user":"alice"`) || !strings.Contains(b, csrf) {
		t.Errorf("session: %s %s; want 200 with the user and csrf", resp.Status, b)
	}
	for name, hdr := range map[string]map[string]string{
		"no cookie":     nil,
		"forged cookie": cookieHdr(randomToken()),
		"cookie's hash": cookieHdr(cookieKey(cookie)),
	} {
		resp := ts.do("GET", "/api/session", "", hdr)
		if b := body(t, resp); resp.StatusCode != 401 {
			t.Errorf("session, %s: %s %s; want 401", name, resp.Status, b)
		}
	}

	// logout needs the CSRF token
	for name, tok := range map[string]string{"no token": "", "wrong token": randomToken()} {
		hdr := cookieHdr(cookie)
		hdr[CSRFHeader] = tok
		resp := ts.do("POST", "/api/logout", "", hdr)
		if b := body(t, resp); resp.StatusCode != 403 {
			t.Errorf("logout, %s: %s %s; want 403", name, resp.Status, b)
		}
	}
	hdr := cookieHdr(cookie)
	hdr[CSRFHeader] = csrf
	resp = ts.do("POST", "/api/logout", "", hdr)
	if b := body(t, resp); resp.StatusCode != 204 {
		t.Fatalf("logout: %s %s; want 204", resp.Status, b)
	}
	if sc := resp.Header.Get("Set-Cookie"); !strings.HasPrefix(sc, CookieName+"=;") || !strings.Contains(sc, "Max-Age=0") {
		t.Errorf("logout Set-Cookie %q; want the cookie cleared", sc)
	}

	// the cookie replayed after logout is worth nothing
	resp = ts.do("GET", "/api/session", "", cookieHdr(cookie))
	if b := body(t, resp); resp.StatusCode != 401 {
		t.Errorf("session after logout: %s %s; want 401", resp.Status, b)
	}
	resp = ts.do("POST", "/api/logout", "", hdr)
	if b := body(t, resp); resp.StatusCode != 401 {
		t.Errorf("logout again: %s %s; want 401", resp.Status, b)
	}
	if _, code := ts.dialWS(cookie, ts.origin(), 80, 24); code != 401 {
		t.Errorf("WebSocket after logout: %d; want 401", code)
	}
}

// TestHungLoginDoesNotBlock: a PAM conversation that hangs holds its own
// login only.
func TestHungLoginDoesNotBlock(t *testing.T) {
	ts := newTestServer(t, nil)
	slow := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", ts.url("/api/login"), strings.NewReader(loginBody("slow", testPassword)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := ts.client.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	select {
	case <-ts.auth.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow login never reached the authenticator")
	}
	start := time.Now()
	ts.login("alice")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a login took %v while another hung; want it independent", d)
	}
	select {
	case code := <-slow:
		t.Fatalf("the hung login answered %d before it was released", code)
	default:
	}
	close(ts.auth.release)
	if code := <-slow; code != 200 {
		t.Errorf("the slow login, released: %d; want 200", code)
	}
}

func TestPasswordNeverLogged(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.login("alice")
	for _, u := range []string{"alice", "nobody", "carol", "broken"} {
		body(t, ts.do("POST", "/api/login", loginBody(u, testPassword+"-"+u), nil))
	}
	body(t, ts.do("POST", "/api/login", `{"user":"alice","password":"`+testPassword+`",}`, nil)) // bad JSON
	body(t, ts.do("POST", "/api/login", loginBody("alice", testPassword), map[string]string{"Content-Type": "text/plain"}))
	logs := ts.logs.String()
	if strings.Contains(logs, testPassword) {
		t.Errorf("the password is in the server's log:\n%s", logs)
	}
	if strings.Contains(logs, "nobody") {
		t.Errorf("a typed name that is no account is in the server's log (it may be a password)")
	}
	if !strings.Contains(logs, `"msg":"web login"`) {
		t.Errorf("no login in the log:\n%s", logs)
	}
}

func TestNewOptions(t *testing.T) {
	cert, _ := testCert(t)
	good := func() Options {
		return Options{
			Layout: paths.New(t.TempDir()), Certificate: cert, Static: testStatic,
			AllowHosts: []string{"host.example"}, Authenticator: newFakeAuth(), DCUI: "/usr/bin/dcui",
		}
	}
	tests := []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"no certificate", func(o *Options) { o.Certificate = tls.Certificate{} }, "certificate"},
		{"no authenticator", func(o *Options) { o.Authenticator = nil }, "authenticator"},
		{"no dcui", func(o *Options) { o.DCUI = "" }, "dcui"},
		{"no static", func(o *Options) { o.Static = nil }, "front end"},
		{"no hosts", func(o *Options) { o.AllowHosts = nil }, "allowed host"},
		{"bad host", func(o *Options) { o.AllowHosts = []string{"https://x.example/"} }, `"https://x.example/"`},
		{"no layout", func(o *Options) { o.Layout = paths.Layout{} }, "layout"},
		{"warning too long", func(o *Options) { o.IdleTimeout, o.IdleWarning = time.Minute, time.Minute }, "idle warning"},
	}
	for _, tt := range tests {
		o := good()
		tt.change(&o)
		_, err := New(o)
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v; want ErrInvalidOptions naming %s", tt.name, err, tt.want)
		}
	}
	s, err := New(good())
	if err != nil {
		t.Fatal(err)
	}
	if s.opts.MaxSessions != 4 || s.opts.MaxPerUser != 2 || s.opts.IdleTimeout != auth.DefaultIdleTimeout ||
		s.opts.IdleWarning != time.Minute || s.opts.Lifetime != 8*time.Hour || s.opts.ReattachWindow != 20*time.Second {
		t.Errorf("defaults %+v", s.opts)
	}
	if c := s.TLSConfig(); c.MinVersion != tls.VersionTLS12 {
		t.Errorf("TLS MinVersion %x; want TLS 1.2", c.MinVersion)
	}
}

// TestTLSOnly: the listener speaks TLS 1.2 or later, and nothing in plain
// HTTP.
func TestTLSOnly(t *testing.T) {
	ts := newTestServer(t, nil)
	conn, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(conn)
	conn.Close()
	if strings.Contains(string(b), "<title>virtcon") || strings.HasPrefix(string(b), "HTTP/1.1 200") {
		t.Errorf("plain HTTP got the page: %q", b)
	}
	_, err = tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: ts.pool, MaxVersion: tls.VersionTLS11})
	if err == nil {
		t.Error("a TLS 1.1 handshake succeeded; want TLS 1.2 at least")
	}
}

func TestHostNames(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"Host.Example.", "host.example"},
		{"[::1]", "::1"},
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"127.0.0.1", "127.0.0.1"},
	} {
		if got := canonicalHost(tt.in); got != tt.want {
			t.Errorf("canonicalHost(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"host.example:8443", "HOST.example:8443", true},
		{"host.example", "host.example:443", true},
		{"host.example:8443", "host.example:9443", false},
		{"[::1]:8443", "[0:0::1]:8443", true},
		{"a.example:8443", "b.example:8443", false},
	} {
		if got := sameHostPort(tt.a, tt.b); got != tt.want {
			t.Errorf("sameHostPort(%q, %q) = %v; want %v", tt.a, tt.b, got, tt.want)
		}
	}
	if _, err := netip.ParseAddr(canonicalHost("[fe80::1%eth0]")); err != nil {
		t.Errorf("a zoned address: %v", err)
	}
}

// TestServesStatic: the embedded page (Static) is what / serves, each
// file with its type, under the same headers.
func TestServesStatic(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Static = Static })
	for path, typ := range map[string]string{"/": "text/html", "/app.js": "javascript", "/app.css": "text/css"} {
		resp := ts.do("GET", path, "", nil)
		b := body(t, resp)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), typ) || len(b) == 0 {
			t.Errorf("GET %s: %s %q (%d bytes); want 200 %s", path, resp.Status, resp.Header.Get("Content-Type"), len(b), typ)
		}
		if resp.Header.Get("Content-Security-Policy") != contentSecurityPolicy {
			t.Errorf("GET %s: no CSP", path)
		}
	}
	resp := ts.do("GET", "/", "", nil)
	if b := body(t, resp); !strings.Contains(b, `id="terminal"`) {
		t.Errorf("GET / is not the web terminal's page:\n%s", b)
	}
}

// TestSlowLoginBody: a login whose body never completes loses its
// connection at the body's deadline, before any login.
func TestSlowLoginBody(t *testing.T) {
	old := loginBodyTimeout
	loginBodyTimeout = 300 * time.Millisecond
	t.Cleanup(func() { loginBodyTimeout = old })
	ts := newTestServer(t, nil)
	conn, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: ts.pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "POST /api/login HTTP/1.1\r\nHost: " + ts.addr + "\r\nOrigin: " + ts.origin() +
		"\r\nSec-Fetch-Site: same-origin\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"user\":\"al"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	conn.SetReadDeadline(start.Add(5 * time.Second))
	_, err = io.Copy(io.Discard, conn) // the 400, then the end of the connection
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after %v with the body unfinished; want it closed after %v", time.Since(start).Round(time.Millisecond), loginBodyTimeout)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("connection closed after %v; want about %v", d, loginBodyTimeout)
	}
	// a login that sends its body in time still works, and its slow PAM
	// is not cut short by the deadline
	go func() { time.Sleep(2 * loginBodyTimeout); close(ts.auth.release) }()
	resp := ts.do("POST", "/api/login", loginBody("slow", testPassword), nil)
	if b := body(t, resp); resp.StatusCode != http.StatusOK {
		t.Errorf("login slower than the body's deadline: %s %s; want 200", resp.Status, b)
	}
}

// TestConnectionLimit: a connection over maxConns is closed at once; one
// that ends gives its place back.
func TestConnectionLimit(t *testing.T) {
	old := maxConns
	maxConns = 2
	t.Cleanup(func() { maxConns = old })
	ts := newTestServer(t, nil)
	dial := func() (*tls.Conn, error) {
		c, err := net.DialTimeout("tcp", ts.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, &tls.Config{RootCAs: ts.pool, ServerName: "localhost"})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		return tc, tc.Handshake()
	}
	var held []*tls.Conn
	for range 2 {
		c, err := dial()
		if err != nil {
			t.Fatalf("connection within the limit: %v", err)
		}
		held = append(held, c)
	}
	if c, err := dial(); err == nil {
		c.Close()
		t.Fatal("a third connection with a limit of 2: handshake succeeded; want it closed")
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := dial()
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection after one ended: %v; want its place back", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	held[1].Close()
}

// TestAllowedHosts: besides the list, the address the connection came in
// on (a new DHCP address needs no restart) and one label under a
// wildcard name; nothing else.
func TestAllowedHosts(t *testing.T) {
	ts := newTestServer(t, func(o *Options) {
		o.AllowHosts = []string{"localhost", "*.example.org"}
		o.MaxPerUser = 8
		o.MaxSessions = 8
	})
	port := ts.addr[strings.LastIndex(ts.addr, ":")+1:]
	for _, tt := range []struct {
		host string
		code int
	}{
		{"localhost:" + port, 200},
		{ts.addr, 200}, // 127.0.0.1: not on the list, the connection's own address
		{"127.0.0.2:" + port, 421},
		{"[::1]:" + port, 421},
		{"a.example.org:" + port, 200},
		{"A.Example.Org.:" + port, 200},
		{"a.b.example.org:" + port, 421},
		{"example.org:" + port, 421},
		{".example.org:" + port, 421},
		{"a.example.org.evil.example:" + port, 421},
	} {
		resp := ts.do("GET", "/", "", map[string]string{"Host": tt.host})
		if b := body(t, resp); resp.StatusCode != tt.code {
			t.Errorf("Host %s: %s %s; want %d", tt.host, resp.Status, b, tt.code)
		}
	}
	cookie, _ := ts.login("alice")
	for _, tt := range []struct {
		host, origin string
		code         int
	}{
		{ts.addr, "https://" + ts.addr, 101},
		{"a.example.org:" + port, "https://a.example.org:" + port, 101},
		{"a.b.example.org:" + port, "https://a.b.example.org:" + port, 421},
	} {
		code, _ := ts.rawUpgrade("GET", tt.host, map[string]string{"Origin": tt.origin, "Cookie": CookieName + "=" + cookie})
		if code != tt.code {
			t.Errorf("WebSocket with Host %s, Origin %s: %d; want %d", tt.host, tt.origin, code, tt.code)
		}
	}
	for _, bad := range []string{"a.*.example.org", "*example.org", "*"} {
		o := Options{Layout: ts.layout, Certificate: ts.srv.opts.Certificate, Static: testStatic,
			AllowHosts: []string{bad}, Authenticator: newFakeAuth(), DCUI: "/usr/bin/dcui"}
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "wildcard") {
			t.Errorf("allowed host %q: New = %v; want ErrInvalidOptions about the wildcard", bad, err)
		}
	}
}

// TestSetCertificate: a renewed certificate is what the next handshake
// gets, without a restart.
func TestSetCertificate(t *testing.T) {
	ts := newTestServer(t, nil)
	peer := func() []byte {
		t.Helper()
		// the test only reads what the server presents
		c, err := tls.Dial("tcp", ts.addr, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	first := peer()
	renewed, _ := testCert(t)
	ts.srv.SetCertificate(renewed)
	if got := peer(); bytes.Equal(got, first) || !bytes.Equal(got, renewed.Certificate[0]) {
		t.Error("after SetCertificate the server still presents the first certificate")
	}
}
