package auth

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
)

// fakeClock is a wall clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 4, 9, 12, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakePAM answers like a PAM stack over a small user table.
type fakePAM struct {
	mu       sync.Mutex
	calls    int
	services []string
	password map[string]string // user -> password
	account  map[string]error  // user -> AcctMgmt refusal
	stackErr error             // the whole stack fails
	// delay is how long a transaction takes (PAM's fail delay, a slow
	// module); like realPAM and processPAM, it returns early with ctx's
	// error when ctx is done first.
	delay time.Duration
	// during, when set, runs as PAM starts: what a console killed at that
	// moment would leave behind.
	during func(user string)
}

func (f *fakePAM) auth(ctx context.Context, service, user, password string) error {
	f.mu.Lock()
	f.calls++
	f.services = append(f.services, service)
	delay, during := f.delay, f.during
	f.mu.Unlock()
	if during != nil {
		during(user)
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return fmt.Errorf("pam: %w", ctx.Err())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stackErr != nil {
		return f.stackErr
	}
	pw, ok := f.password[user]
	if !ok {
		return &pamError{kind: ErrBadCredentials, step: "authenticate", status: errors.New("User not known to the underlying authentication module")}
	}
	if pw != password {
		return &pamError{kind: ErrBadCredentials, step: "authenticate", status: errors.New("Authentication failure")}
	}
	return f.account[user]
}

func (f *fakePAM) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

const (
	testGroup    = "ops"
	testPassword = "S3cret-Pa55-xyzzy"
)

var (
	testUIDs = map[string]int{"root": 0, "alice": 1000, "bob": 1001, "carol": 1002, "dave": 1003}
	// alice is an admin through a supplementary group, dave through his
	// primary group (lookups return both kinds); carol is not an admin.
	testGroups = map[string][]string{
		"root":  {"root"},
		"alice": {"users", testGroup},
		"bob":   {"users", testGroup},
		"carol": {"users"},
		"dave":  {testGroup},
	}
)

type harness struct {
	a      *Authenticator
	pam    *fakePAM
	clock  *fakeClock
	layout paths.Layout
	logs   *bytes.Buffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{
		pam: &fakePAM{
			password: map[string]string{
				"root": testPassword, "alice": testPassword, "bob": testPassword,
				"carol": testPassword, "dave": testPassword,
			},
			account: map[string]error{
				"bob": &pamError{kind: ErrAccount, step: "account", status: errors.New("User account has expired"),
					messages: []string{"Your account has expired; please contact your system administrator."}},
			},
		},
		clock:  newFakeClock(),
		layout: paths.New(t.TempDir()),
		logs:   &bytes.Buffer{},
	}
	h.a = h.newAuthenticator()
	return h
}

// newAuthenticator is a fresh Authenticator on the same state: a restarted dcui.
func (h *harness) newAuthenticator() *Authenticator {
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return New(h.layout, log, Options{
		Group: testGroup,
		Now:   h.clock.Now,
		PAM:   h.pam.auth,
		LookupGroups: func(u string) ([]string, error) {
			g, ok := testGroups[u]
			if !ok {
				return nil, user.UnknownUserError(u)
			}
			return g, nil
		},
		LookupUID: func(u string) (int, error) {
			uid, ok := testUIDs[u]
			if !ok {
				return 0, user.UnknownUserError(u)
			}
			return uid, nil
		},
	})
}

func (h *harness) login(user, password string) (*Identity, error) {
	return h.a.Login(context.Background(), user, password, "tty1")
}

// failures is the count of failures the state file holds for a typed name.
func (h *harness) failures(t *testing.T, name string) int {
	t.Helper()
	l := h.a.limiter()
	key, err := l.nameKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.read()
	if err != nil {
		t.Fatal(err)
	}
	return s.Records[nameMAC(key, name)].Failures
}

// shownAs maps a recorded user ("UNKNOWN:1a2b3c4d") to its form without
// the hash, for comparisons.
func shownAs(u string) string {
	if strings.HasPrefix(u, unknownUser+":") {
		return unknownUser
	}
	return u
}

func readAudit(t *testing.T, layout paths.Layout) []AuditRecord {
	t.Helper()
	f, err := os.Open(filepath.Join(layout.LogDir(), AuditFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []AuditRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r AuditRecord
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestLogin(t *testing.T) {
	stackErr := errors.New("pam start: Critical error - immediate abort")
	tests := []struct {
		name       string
		user, pw   string
		stackErr   error
		wantErr    error // nil: success
		wantResult string
		wantPAM    bool     // PAM was asked
		wantInErr  []string // substrings of the error text
		wantUID    int
	}{
		{name: "admin by supplementary group", user: "alice", pw: testPassword, wantResult: "success", wantPAM: true, wantUID: 1000},
		{name: "admin by primary group", user: "dave", pw: testPassword, wantResult: "success", wantPAM: true, wantUID: 1003},
		{name: "root without the group", user: "root", pw: testPassword, wantResult: "success", wantPAM: true, wantUID: 0},
		{name: "wrong password", user: "alice", pw: "wrong", wantErr: ErrBadCredentials, wantResult: "bad-credentials", wantPAM: true,
			wantInErr: []string{"unknown user or wrong password"}},
		{name: "unknown user", user: "mallory", pw: testPassword, wantErr: ErrBadCredentials, wantResult: "bad-credentials", wantPAM: true,
			wantInErr: []string{"unknown user or wrong password"}},
		{name: "expired account", user: "bob", pw: testPassword, wantErr: ErrAccount, wantResult: "account", wantPAM: true,
			wantInErr: []string{"account refused", "Your account has expired"}},
		{name: "not in the group", user: "carol", pw: testPassword, wantErr: ErrNotAdmin, wantResult: "not-admin", wantPAM: true,
			wantInErr: []string{`group "ops"`}},
		{name: "pam stack broken", user: "alice", pw: testPassword, stackErr: stackErr, wantErr: stackErr, wantResult: "error", wantPAM: true},
		{name: "empty user", user: "", pw: testPassword, wantErr: ErrBadCredentials, wantResult: "bad-credentials"},
		{name: "control character in user", user: "al\x1bice", pw: testPassword, wantErr: ErrBadCredentials, wantResult: "bad-credentials"},
		{name: "invalid utf-8 in user", user: "al\xffice", pw: testPassword, wantErr: ErrBadCredentials, wantResult: "bad-credentials"},
		{name: "user too long", user: strings.Repeat("a", maxUserLen+1), pw: testPassword, wantErr: ErrBadCredentials, wantResult: "bad-credentials"},
		{name: "user lookup fails after pam", user: "eve", pw: testPassword, wantErr: nil, wantResult: "error", wantPAM: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.pam.stackErr = tt.stackErr
			if tt.user == "eve" {
				h.pam.password["eve"] = testPassword // PAM knows eve, NSS does not
			}
			id, err := h.login(tt.user, tt.pw)
			switch {
			case tt.wantResult == "success":
				if err != nil {
					t.Fatalf("Login = %v; want success", err)
				}
				if id.User != tt.user || id.UID != tt.wantUID || !slices.Equal(id.Groups, testGroups[tt.user]) {
					t.Errorf("Identity = %+v; want user %q uid %d groups %v", id, tt.user, tt.wantUID, testGroups[tt.user])
				}
			case err == nil:
				t.Fatalf("Login succeeded with %+v; want an error", id)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("Login = %v; want %v", err, tt.wantErr)
			}
			if err != nil && id != nil {
				t.Errorf("Login returned identity %+v with error %v", id, err)
			}
			for _, s := range tt.wantInErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if got := h.pam.Calls() > 0; got != tt.wantPAM {
				t.Errorf("PAM called = %v; want %v", got, tt.wantPAM)
			}
			if h.pam.Calls() > 0 && h.pam.services[0] != DefaultService {
				t.Errorf("PAM service = %q; want %q", h.pam.services[0], DefaultService)
			}
			// An attempt that reaches PAM is audited before PAM runs, then
			// its outcome.
			var results []string
			for _, r := range readAudit(t, h.layout) {
				results = append(results, r.Result)
			}
			want := []string{tt.wantResult}
			if tt.wantPAM {
				want = []string{"attempt", tt.wantResult}
			}
			if !slices.Equal(results, want) {
				t.Errorf("audit results %q; want %q", results, want)
			}
		})
	}
}

// An unknown user and a wrong password must read the same; the error does
// not even echo the name, which may be a password typed into the wrong field.
func TestBadCredentialsOneMessage(t *testing.T) {
	h := newHarness(t)
	_, wrong := h.login("alice", "wrong")
	_, unknown := h.login("mallory", "wrong")
	if wrong == nil || unknown == nil {
		t.Fatalf("errors %v, %v; want two failures", wrong, unknown)
	}
	if wrong.Error() != unknown.Error() {
		t.Errorf("wrong password reads %q, unknown user %q; want one message", wrong, unknown)
	}
	if strings.Contains(unknown.Error(), "mallory") {
		t.Errorf("error %q echoes the unknown name", unknown)
	}
	// The audit log, for the administrator, keeps PAM's own status.
	for _, r := range readAudit(t, h.layout) {
		if r.Result != "attempt" && !strings.Contains(r.Detail, "pam authenticate: ") {
			t.Errorf("audit detail %q; want PAM's status", r.Detail)
		}
	}
}

func TestLoginOptionsDefaultsAndService(t *testing.T) {
	a := New(paths.New(t.TempDir()), nil, Options{PAM: func(context.Context, string, string, string) error { return nil }})
	if a.Service() != "virtcon" || a.Group() != "virtcon-admin" {
		t.Errorf("defaults: service %q group %q; want virtcon, virtcon-admin", a.Service(), a.Group())
	}
	var got string
	a = New(paths.New(t.TempDir()), nil, Options{
		Service: "virtcon-x",
		PAM: func(_ context.Context, service, _, _ string) error {
			got = service
			return errors.New("stop here")
		},
	})
	if _, err := a.Login(context.Background(), "alice", "pw", "tty1"); err == nil {
		t.Fatal("Login succeeded; want the fake's error")
	}
	if got != "virtcon-x" {
		t.Errorf("PAM service = %q; want virtcon-x", got)
	}
	a = New(paths.New(t.TempDir()), nil, Options{Service: "../shadow", PAM: func(context.Context, string, string, string) error {
		t.Error("PAM called with an invalid service name")
		return nil
	}})
	if _, err := a.Login(context.Background(), "alice", "pw", "tty1"); err == nil {
		t.Error("Login with service ../shadow succeeded; want an error")
	}
}

func TestAuditContentAndPermissions(t *testing.T) {
	h := newHarness(t)
	h.a.service = "virtcon-audit"
	h.login("alice", testPassword)
	h.a.Login(context.Background(), "mallory", "nope", "ttyS0")
	h.a.Login(context.Background(), "carol", testPassword, "pts/3")

	recs := readAudit(t, h.layout)
	want := []AuditRecord{
		{Service: "virtcon-audit", User: "alice", TTY: "tty1", Result: "attempt"},
		{Service: "virtcon-audit", User: "alice", TTY: "tty1", Result: "success"},
		{Service: "virtcon-audit", User: "UNKNOWN", TTY: "ttyS0", Result: "attempt"},
		{Service: "virtcon-audit", User: "UNKNOWN", TTY: "ttyS0", Result: "bad-credentials"},
		{Service: "virtcon-audit", User: "carol", TTY: "pts/3", Result: "attempt"},
		{Service: "virtcon-audit", User: "carol", TTY: "pts/3", Result: "not-admin"},
	}
	if len(recs) != len(want) {
		t.Fatalf("audit has %d records; want %d", len(recs), len(want))
	}
	for i, r := range recs {
		ts, err := time.Parse(time.RFC3339, r.Time)
		if err != nil || !ts.Equal(h.clock.Now()) {
			t.Errorf("record %d time %q (%v); want %s in RFC 3339", i, r.Time, err, h.clock.Now().Format(time.RFC3339))
		}
		if r.Detail == "" {
			t.Errorf("record %d has no detail", i)
		}
		r.Time, r.Detail, r.User = "", "", shownAs(r.User)
		if r != want[i] {
			t.Errorf("record %d = %+v; want %+v", i, r, want[i])
		}
	}
	for path, perm := range map[string]os.FileMode{
		filepath.Join(h.layout.LogDir(), AuditFile): 0o600,
		h.layout.LogDir(): 0o750,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != perm {
			t.Errorf("%s mode %v; want %v", path, st.Mode().Perm(), perm)
		}
	}

	// The logger gets every attempt too: Info for a success, Warn otherwise.
	var levels []string
	sc := bufio.NewScanner(bytes.NewReader(h.logs.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "login" || m["msg"] == "login refused" {
			levels = append(levels, m["level"].(string)+" "+shownAs(m["user"].(string))+" "+m["result"].(string))
		}
	}
	if wantLevels := []string{"INFO alice success", "WARN UNKNOWN bad-credentials", "WARN carol not-admin"}; !slices.Equal(levels, wantLevels) {
		t.Errorf("log lines %q; want %q", levels, wantLevels)
	}
}

// The password must appear in no error, no audit line and no log line,
// whatever the outcome.
func TestPasswordNeverLogged(t *testing.T) {
	h := newHarness(t)
	var errs []string
	attempt := func(user, pw string) {
		if _, err := h.login(user, pw); err != nil {
			errs = append(errs, err.Error())
		}
	}
	attempt("alice", testPassword) // success
	attempt("bob", testPassword)   // account refused
	attempt("carol", testPassword) // not an admin
	for range 5 {                  // bad credentials, then rate limited
		attempt("alice", testPassword+"x")
	}
	attempt("alice", testPassword) // rate limited with the right password
	h.pam.stackErr = errors.New("pam stack broken")
	attempt("dave", testPassword)

	audit, err := os.ReadFile(filepath.Join(h.layout.LogDir(), AuditFile))
	if err != nil {
		t.Fatal(err)
	}
	state, _ := os.ReadFile(filepath.Join(h.layout.RunDir(), "auth-failures.json"))
	for what, text := range map[string]string{
		"audit log":     string(audit),
		"slog output":   h.logs.String(),
		"errors":        strings.Join(errs, "\n"),
		"failure state": string(state),
	} {
		if strings.Contains(text, testPassword) {
			t.Errorf("the password appears in the %s:\n%s", what, text)
		}
	}
	outcomes, attempts := 0, 0
	for _, r := range readAudit(t, h.layout) {
		if r.Result == "attempt" {
			attempts++
		} else {
			outcomes++
		}
	}
	if outcomes != 10 || attempts != 8 {
		t.Errorf("audit has %d outcomes, %d attempts; want 10 (every attempt), 8 (those that reached PAM)", outcomes, attempts)
	}
	if !strings.Contains(string(audit), `"rate-limited"`) {
		t.Error("no rate-limited attempt in the audit log; the scenario did not cover it")
	}
}

// TestUnknownUserNotRecorded: a name that is not an account may be a
// password typed into the User field. It must reach no file and no log;
// repeated attempts with it can still be told apart, and are rate limited.
func TestUnknownUserNotRecorded(t *testing.T) {
	h := newHarness(t)
	const typed = "Tr0ub4dor&3-typed-as-user"
	var errs []string
	for range freeFailures + 2 {
		if _, err := h.login(typed, "x"); err != nil {
			errs = append(errs, err.Error())
		}
	}
	h.login("al\x1b"+typed, "x") // refused before PAM: still not recorded
	h.login("alice", "wrong")    // a known user is recorded by name
	h.login("mallory", "wrong")  // another unknown name

	audit, err := os.ReadFile(filepath.Join(h.layout.LogDir(), AuditFile))
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(filepath.Join(h.layout.RunDir(), "auth-failures.json"))
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{
		"audit log":     string(audit),
		"slog output":   h.logs.String(),
		"failure state": string(state),
		"errors":        strings.Join(errs, "\n"),
	} {
		if strings.Contains(text, typed) {
			t.Errorf("the unknown name appears in the %s:\n%s", what, text)
		}
	}
	// The state file holds no name at all, known or not.
	for _, name := range []string{"alice", "mallory"} {
		if strings.Contains(string(state), name) {
			t.Errorf("the failure state holds %q:\n%s", name, state)
		}
	}
	if !strings.Contains(errs[len(errs)-1], "too many failed logins") {
		t.Errorf("last error %q; want the unknown name rate limited", errs[len(errs)-1])
	}

	tags := map[string][]string{} // recorded user -> results
	for _, r := range readAudit(t, h.layout) {
		tags[r.User] = append(tags[r.User], r.Result)
	}
	if _, ok := tags["alice"]; !ok {
		t.Errorf("no audit line names alice: %v", tags)
	}
	var unknown []string
	for u := range tags {
		if u != "alice" {
			if !strings.HasPrefix(u, "UNKNOWN:") || len(u) != len("UNKNOWN:")+8 {
				t.Errorf("audit user %q; want alice or UNKNOWN:<8 hex>", u)
			}
			unknown = append(unknown, u)
		}
	}
	// One tag per distinct name: the typed one, its variant, mallory.
	if len(unknown) != 3 {
		t.Errorf("unknown names recorded as %q; want 3 distinct tags", unknown)
	}
	key := filepath.Join(h.layout.RunDir(), nameKeyFile)
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 || st.Size() != nameKeyLen {
		t.Errorf("name key %s: %v, %v; want %d bytes, mode 0600", key, st, err, nameKeyLen)
	}
}

func TestLookupRealUser(t *testing.T) {
	// root's primary group is root, usually listed in no member line of
	// /etc/group: it must come from the primary gid.
	uid, err := lookupUID("root")
	if err != nil || uid != 0 {
		t.Fatalf("lookupUID(root) = %d, %v; want 0", uid, err)
	}
	groups, err := lookupGroups("root")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(groups, "root") {
		t.Errorf("lookupGroups(root) = %v; want it to include the primary group root", groups)
	}
	if _, err := lookupGroups("vctu-no-such-user"); err == nil {
		t.Error("lookupGroups of a missing user succeeded; want an error")
	}
}
