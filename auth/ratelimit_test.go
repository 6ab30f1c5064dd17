package auth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRetryDelayPolicy(t *testing.T) {
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{0, 0},
		{1, 0},
		{2, 0},
		{3, 0}, // the first three are free
		{4, 5 * time.Second},
		{5, 10 * time.Second},
		{6, 20 * time.Second},
		{7, 40 * time.Second},
		{8, 80 * time.Second},
		{9, 160 * time.Second},
		{10, 5 * time.Minute}, // 320 s, capped
		{11, 5 * time.Minute},
		{1000, 5 * time.Minute},
	}
	for _, tt := range tests {
		if got := retryDelay(tt.failures); got != tt.want {
			t.Errorf("retryDelay(%d) = %v; want %v", tt.failures, got, tt.want)
		}
	}
}

// retryAfter returns the RetryAfter of a rate-limit error, or fails.
func retryAfter(t *testing.T, err error) time.Duration {
	t.Helper()
	var rl *RateLimitError
	if !errors.As(err, &rl) || !errors.Is(err, ErrRateLimited) {
		t.Fatalf("error %v; want a *RateLimitError wrapping ErrRateLimited", err)
	}
	return rl.RetryAfter
}

func TestRateLimitLogin(t *testing.T) {
	h := newHarness(t)
	fail := func() error {
		t.Helper()
		_, err := h.login("alice", "wrong")
		return err
	}
	for i := 1; i <= 4; i++ {
		if err := fail(); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("failure %d: %v; want ErrBadCredentials", i, err)
		}
	}
	if h.pam.Calls() != 4 {
		t.Fatalf("PAM calls = %d; want 4", h.pam.Calls())
	}

	// After the 4th failure: 5 s, PAM not asked, even with the right password.
	_, err := h.login("alice", testPassword)
	if got := retryAfter(t, err); got != 5*time.Second {
		t.Errorf("RetryAfter = %v; want 5s", got)
	}
	if h.pam.Calls() != 4 {
		t.Errorf("PAM called while rate limited (%d calls)", h.pam.Calls())
	}
	if want := "try again in 5s"; !contains(err, want) {
		t.Errorf("error %q; want it to say %q", err, want)
	}
	h.clock.Advance(3 * time.Second)
	if got := retryAfter(t, fail()); got != 2*time.Second {
		t.Errorf("RetryAfter after 3 s = %v; want 2s (a refused attempt does not count)", got)
	}

	// Other names are not affected; unknown names are counted by the name tried.
	if _, err := h.login("dave", testPassword); err != nil {
		t.Errorf("dave: %v; want success while alice is limited", err)
	}
	for range 4 {
		h.login("mallory", "x")
	}
	if _, err := h.login("mallory", "x"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("unknown user after 4 failures: %v; want rate limited", err)
	}

	// A restarted console sees the same lockout.
	h.a = h.newAuthenticator()
	if _, err := h.login("alice", testPassword); !errors.Is(err, ErrRateLimited) {
		t.Errorf("after restart: %v; want still rate limited", err)
	}

	h.clock.Advance(2 * time.Second)
	if err := fail(); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("5th failure: %v; want ErrBadCredentials", err)
	}
	if got := retryAfter(t, fail()); got != 10*time.Second {
		t.Errorf("after 5 failures RetryAfter = %v; want 10s", got)
	}

	// A success clears the record: the next failure is free again.
	h.clock.Advance(10 * time.Second)
	if _, err := h.login("alice", testPassword); err != nil {
		t.Fatalf("login after the wait: %v", err)
	}
	if err := fail(); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("after success: %v; want a free failure", err)
	}
	if _, err := h.login("alice", testPassword); err != nil {
		t.Errorf("after one free failure: %v; want success", err)
	}
}

func TestRateLimitForgetsOldFailures(t *testing.T) {
	h := newHarness(t)
	for range 4 {
		h.login("alice", "wrong")
	}
	h.clock.Advance(forgetFailures + time.Second)
	// The record is gone: this failure is the first of a new run.
	for i := range 3 {
		if _, err := h.login("alice", "wrong"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("failure %d after 15 min: %v; want ErrBadCredentials", i+1, err)
		}
	}
	if _, err := h.login("alice", testPassword); err != nil {
		t.Errorf("after 3 fresh failures: %v; want success", err)
	}
}

func TestRateLimitCountsRefusalsNotBreakage(t *testing.T) {
	tests := []struct {
		name    string
		user    string
		stack   error
		limited bool
	}{
		{name: "not an admin counts", user: "carol", limited: true},
		{name: "account refused counts", user: "bob", limited: true},
		{name: "a broken PAM stack does not", user: "alice", stack: errors.New("pam: module unknown"), limited: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.pam.stackErr = tt.stack
			for range 4 {
				h.login(tt.user, testPassword)
			}
			_, err := h.login(tt.user, testPassword)
			if got := errors.Is(err, ErrRateLimited); got != tt.limited {
				t.Errorf("5th attempt: %v; rate limited = %v, want %v", err, got, tt.limited)
			}
		})
	}
}

func TestRateLimitClockSetBack(t *testing.T) {
	h := newHarness(t)
	for i := range 6 { // 6 failures, each after the wait: 20 s
		h.clock.Advance(retryDelay(i))
		if _, err := h.login("alice", "wrong"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	h.clock.Advance(-time.Hour)
	_, err := h.login("alice", testPassword)
	if got := retryAfter(t, err); got != 20*time.Second {
		t.Errorf("RetryAfter with the clock an hour back = %v; want the policy's 20s at most", got)
	}
}

func TestRateLimitStateFile(t *testing.T) {
	h := newHarness(t)
	h.login("alice", "wrong")
	path := filepath.Join(h.layout.RunDir(), "auth-failures.json")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v; want 0600", path, st.Mode().Perm())
	}
	// A corrupt file starts afresh instead of disabling the limit.
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		h.login("alice", "wrong")
	}
	if _, err := h.login("alice", testPassword); !errors.Is(err, ErrRateLimited) {
		t.Errorf("after a corrupt state file and 4 failures: %v; want rate limited", err)
	}
	if !strings.Contains(h.logs.String(), "starting afresh") {
		t.Error("corrupt state file not reported on the logger")
	}
}

func TestFailureStatePrune(t *testing.T) {
	now := time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC)
	s := newFailureState()
	for i := range maxRecords + 10 {
		s.Records[fmt.Sprintf("u%04d", i)] = failureRecord{Failures: 1, Last: now.Add(time.Duration(i) * time.Millisecond)}
	}
	s.Records["old"] = failureRecord{Failures: 9, Last: now.Add(-forgetFailures - time.Second)}
	s.prune(now.Add(time.Second))
	if len(s.Records) != maxRecords {
		t.Fatalf("%d records after prune; want %d", len(s.Records), maxRecords)
	}
	if _, ok := s.Records["old"]; ok {
		t.Error("a record older than 15 min survived")
	}
	for i := range 10 {
		if _, ok := s.Records[fmt.Sprintf("u%04d", i)]; ok {
			t.Errorf("u%04d (among the oldest) kept; want the most recent records kept", i)
		}
	}
	if _, ok := s.Records[fmt.Sprintf("u%04d", maxRecords+9)]; !ok {
		t.Error("the newest record was dropped")
	}
}

// Consoles starting attempts at the same time must all be counted, and
// only as many pass as the policy lets through one after another.
func TestRateLimitConcurrentBegin(t *testing.T) {
	h := newHarness(t)
	l := h.a.limiter()
	type result struct {
		wait time.Duration
		err  error
	}
	done := make(chan result)
	for range 8 {
		go func() {
			w, err := l.begin(context.Background(), "k", h.clock.Now())
			done <- result{w, err}
		}()
	}
	passed := 0
	for range 8 {
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.wait == 0 {
			passed++
		}
	}
	s, err := l.read()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Records["k"].Failures; got != freeFailures+1 || passed != freeFailures+1 {
		t.Errorf("%d attempts passed, %d failures recorded; want %d and %d", passed, got, freeFailures+1, freeFailures+1)
	}
}

// TestLoginParallelAttempts: attempts made while others are still in PAM
// must not all pass the check; as many reach PAM as would one after
// another (the free failures, then the one that earns the first lockout).
func TestLoginParallelAttempts(t *testing.T) {
	h := newHarness(t)
	h.pam.delay = 300 * time.Millisecond
	const n = 10
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := h.login("alice", "wrong")
			errs <- err
		}()
	}
	limited := 0
	for range n {
		err := <-errs
		switch {
		case errors.Is(err, ErrRateLimited):
			limited++
		case !errors.Is(err, ErrBadCredentials):
			t.Errorf("Login = %v; want bad credentials or rate limited", err)
		}
	}
	allowed := freeFailures + 1
	if got := h.pam.Calls(); got != allowed || limited != n-allowed {
		t.Errorf("%d parallel attempts: %d reached PAM, %d rate limited; want %d and %d", n, got, limited, allowed, n-allowed)
	}
	// Each refused attempt is counted once: before PAM, not again after.
	if got := h.failures(t, "alice"); got != allowed {
		t.Errorf("failures recorded = %d; want %d", got, allowed)
	}
}

// TestLoginHangUpDuringPAM: PAM sleeps through its fail delay on a wrong
// password; a caller that hangs up meanwhile (the console quits, its PAM
// helper is killed) must have paid for the guess already.
func TestLoginHangUpDuringPAM(t *testing.T) {
	h := newHarness(t)
	h.pam.delay = time.Hour // the fail delay, as far as the caller waits
	h.pam.during = func(user string) {
		// What a console killed now leaves behind: the failure counted and
		// the attempt audited.
		if got := h.failures(t, user); got < 1 {
			t.Errorf("while PAM runs: %d failures recorded; want the attempt counted", got)
		}
		recs := readAudit(t, h.layout)
		if len(recs) == 0 || recs[len(recs)-1].Result != "attempt" {
			t.Errorf("while PAM runs: audit %+v; want an attempt line last", recs)
		}
	}
	for i := 1; i <= freeFailures+1; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := h.a.Login(ctx, "alice", "guess", "ttyS0")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hang-up %d: Login = %v; want the context's error", i, err)
		}
		if got := h.failures(t, "alice"); got != i {
			t.Fatalf("after hang-up %d: %d failures recorded; want %d", i, got, i)
		}
	}
	// An explicit cancel (the caller gone) counts the same.
	ctx, cancel := context.WithCancel(context.Background())
	h.a.pam = func(ctx context.Context, _, _, _, _ string) error {
		cancel()
		return fmt.Errorf("pam: %w", ctx.Err())
	}
	h.clock.Advance(retryDelay(freeFailures + 1))
	if _, err := h.a.Login(ctx, "alice", "guess", "ttyS0"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Login = %v; want context.Canceled", err)
	}
	if got := h.failures(t, "alice"); got != freeFailures+2 {
		t.Errorf("after a cancel: %d failures recorded; want %d", got, freeFailures+2)
	}
	if _, err := h.login("alice", testPassword); !errors.Is(err, ErrRateLimited) {
		t.Errorf("after the hang-ups: %v; want rate limited", err)
	}
	var results []string
	for _, r := range readAudit(t, h.layout) {
		results = append(results, r.Result)
	}
	want := slices.Repeat([]string{"attempt", "error"}, freeFailures+2)
	want = append(want, "rate-limited")
	if !slices.Equal(results, want) {
		t.Errorf("audit results %q; want %q", results, want)
	}
}

// TestLoginFailureAccounting: how each outcome settles the failure counted
// before PAM.
func TestLoginFailureAccounting(t *testing.T) {
	stackErr := errors.New("pam start: Critical error - immediate abort")
	tests := []struct {
		name  string
		user  string
		pw    string
		setup func(h *harness)
		ctx   func() (context.Context, context.CancelFunc)
		want  int // failures after 2 earlier failures and this attempt
	}{
		{name: "success clears", user: "alice", pw: testPassword, want: 0},
		{name: "wrong password counts once", user: "alice", pw: "wrong", want: 3},
		{name: "unknown user counts once", user: "mallory", pw: "wrong", want: 3},
		{name: "account refused counts once", user: "bob", pw: testPassword, want: 3},
		{name: "not an admin counts once", user: "carol", pw: testPassword, want: 3},
		{name: "broken PAM stack is taken back", user: "alice", pw: testPassword,
			setup: func(h *harness) { h.pam.stackErr = stackErr }, want: 2},
		{name: "user database unreadable after PAM is taken back", user: "eve", pw: testPassword,
			setup: func(h *harness) { h.pam.password["eve"] = testPassword }, want: 2},
		{name: "PAM helper dead without an answer is taken back", user: "alice", pw: testPassword,
			setup: func(h *harness) {
				h.a.pam = processPAM(writeScript(t, "#!/bin/sh\nkill -9 $$\n"))
			}, want: 2},
		{name: "caller out of time during PAM still counts", user: "alice", pw: "wrong",
			setup: func(h *harness) { h.pam.delay = time.Hour },
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 20*time.Millisecond)
			}, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			for range 2 {
				h.login(tt.user, "wrong")
			}
			if got := h.failures(t, tt.user); got != 2 {
				t.Fatalf("setup: %d failures; want 2", got)
			}
			if tt.setup != nil {
				tt.setup(h)
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			h.a.Login(ctx, tt.user, tt.pw, "tty1")
			if got := h.failures(t, tt.user); got != tt.want {
				t.Errorf("failures = %d; want %d", got, tt.want)
			}
		})
	}
}

// writeScript writes an executable shell script and returns its path.
func writeScript(t *testing.T, script string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "helper")
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// TestRateLimitBySource: failures of web logins from one address lock that
// address out, whichever names it tries; other addresses and consoles
// without an address are not affected, and the name's own limit still
// holds across addresses.
func TestRateLimitBySource(t *testing.T) {
	h := newHarness(t)
	from := func(user, password, addr string) error {
		t.Helper()
		_, err := h.a.Login(context.Background(), user, password, WebTTY(addr))
		return err
	}
	const bad, good = "192.0.2.7", "192.0.2.8"
	// four different names, one failure each: no name is near its limit
	for i, u := range []string{"alice", "bob", "mallory", "carol"} {
		if err := from(u, "wrong", bad); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("failure %d (%s from %s): %v; want ErrBadCredentials", i+1, u, bad, err)
		}
	}
	calls := h.pam.Calls()
	// the address is locked out, even for a fresh name with its password
	if got := retryAfter(t, from("dave", testPassword, bad)); got != 5*time.Second {
		t.Errorf("dave from %s after 4 failures from it: RetryAfter %v; want 5s", bad, got)
	}
	if h.pam.Calls() != calls {
		t.Errorf("PAM asked while the source was locked out")
	}
	// another address, and a console without one, still log in
	if err := from("dave", testPassword, good); err != nil {
		t.Errorf("dave from %s: %v; want success", good, err)
	}
	if _, err := h.login("root", testPassword); err != nil {
		t.Errorf("root on tty1: %v; want success (no source address)", err)
	}
	// after the wait the address may try again; a success clears its record
	h.clock.Advance(5 * time.Second)
	if err := from("dave", testPassword, bad); err != nil {
		t.Fatalf("dave from %s after the wait: %v", bad, err)
	}
	if err := from("mallory", "wrong", bad); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("after a success from %s: %v; want a free failure", bad, err)
	}

	// a name's own limit holds whatever address it comes from: bob failed
	// once from bad above, three more from three other addresses
	for i := range 3 {
		if err := from("bob", "wrong", fmt.Sprintf("198.51.100.%d", i+1)); !errors.Is(err, ErrBadCredentials) && !errors.Is(err, ErrAccount) {
			t.Fatalf("bob failure %d: %v", i+1, err)
		}
	}
	if err := from("bob", "wrong", "198.51.100.99"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("bob after 4 failures from 4 addresses: %v; want rate limited", err)
	}
}

func TestSourceOf(t *testing.T) {
	tests := []struct{ tty, want string }{
		{WebTTY("192.0.2.7"), "192.0.2.7"},
		{WebTTY("2001:db8::1"), "2001:db8::1"},
		{"tty1", ""},
		{"pts/3", ""},
		{"web/ab12", ""}, // a DCUI session's console name, not a login's source
	}
	for _, tt := range tests {
		if got := SourceOf(tt.tty); got != tt.want {
			t.Errorf("SourceOf(%q) = %q; want %q", tt.tty, got, tt.want)
		}
	}
}

// TestAuditSource: a web login's audit lines and log lines carry its
// source address; a console's have none.
func TestAuditSource(t *testing.T) {
	h := newHarness(t)
	h.a.Login(context.Background(), "dave", testPassword, WebTTY("192.0.2.7"))
	h.a.Login(context.Background(), "dave", "wrong", WebTTY("2001:db8::5"))
	h.login("dave", testPassword)
	var got []string
	for _, r := range readAudit(t, h.layout) {
		got = append(got, r.Result+" "+r.TTY+" source="+r.Source)
	}
	want := []string{
		"attempt web:192.0.2.7 source=192.0.2.7", "success web:192.0.2.7 source=192.0.2.7",
		"attempt web:2001:db8::5 source=2001:db8::5", "bad-credentials web:2001:db8::5 source=2001:db8::5",
		"attempt tty1 source=", "success tty1 source=",
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit %q; want %q", got, want)
	}
	if !strings.Contains(h.logs.String(), `"source":"192.0.2.7"`) {
		t.Errorf("log lines without the source address: %s", h.logs.String())
	}
}

// TestRateLimitWebNeverLocksConsole: web failures for a name lock that
// name's web logins, from any address, but never delay the same name on a
// local console (the last way into a broken host); console failures still
// lock the consoles, not the web; the source's record still locks a web
// login whatever the name.
func TestRateLimitWebNeverLocksConsole(t *testing.T) {
	h := newHarness(t)
	web := func(user, password, addr string) error {
		t.Helper()
		_, err := h.a.Login(context.Background(), user, password, WebTTY(addr))
		return err
	}
	// root guessed from four addresses (no address reaches its own limit)
	for i := range freeFailures + 1 {
		if err := web("root", "x", fmt.Sprintf("192.0.2.%d", i+1)); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("web failure %d for root: %v; want ErrBadCredentials", i+1, err)
		}
	}
	if got := retryAfter(t, web("root", testPassword, "198.51.100.1")); got != firstLockout {
		t.Errorf("root from the web after %d web failures: RetryAfter %v; want %v", freeFailures+1, got, firstLockout)
	}
	for _, tty := range []string{"tty1", "ttyS0", "pts/3"} {
		if _, err := h.a.Login(context.Background(), "root", testPassword, tty); err != nil {
			t.Errorf("root on %s after web failures: %v; want success, not delayed", tty, err)
		}
	}
	if got := h.failures(t, "root"); got != 0 {
		t.Errorf("root's console record holds %d failures after web failures; want 0", got)
	}
	// a console's successes do not clear the web lockout either
	if err := web("root", testPassword, "198.51.100.1"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("root from the web after a console success: %v; want still rate limited", err)
	}

	// console failures still lock the consoles, and only them
	for i := range freeFailures + 1 {
		if _, err := h.login("alice", "wrong"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("console failure %d for alice: %v", i+1, err)
		}
	}
	if _, err := h.a.Login(context.Background(), "alice", testPassword, "ttyS0"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("alice on ttyS0 after 4 failures on tty1: %v; want rate limited", err)
	}
	if err := web("alice", testPassword, "198.51.100.2"); err != nil {
		t.Errorf("alice from the web after console failures: %v; want success", err)
	}

	// the source's record locks a web login whatever the name
	for i, u := range []string{"bob", "carol", "mallory", "eve"} {
		if err := web(u, "wrong", "203.0.113.9"); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("failure %d (%s from 203.0.113.9): %v", i+1, u, err)
		}
	}
	if err := web("dave", testPassword, "203.0.113.9"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("dave from a locked-out source: %v; want rate limited", err)
	}
	if _, err := h.login("dave", testPassword); err != nil {
		t.Errorf("dave on tty1 while a source is locked out: %v; want success", err)
	}
}

func TestSourceOfAddress(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"}, // IPv4-mapped: the IPv4 address
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
		{"not-an-address", "not-an-address"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := sourceOf(tt.addr); got != tt.want {
			t.Errorf("sourceOf(%q) = %q; want %q", tt.addr, got, tt.want)
		}
	}
}

// TestRateLimitIPv6Prefix: an IPv6 host that picks a fresh address in its
// /64 for every guess is locked out like one address; another /64 is not;
// an IPv4 address written IPv4-mapped is the same source.
func TestRateLimitIPv6Prefix(t *testing.T) {
	h := newHarness(t)
	web := func(user, password, addr string) error {
		t.Helper()
		_, err := h.a.Login(context.Background(), user, password, WebTTY(addr))
		return err
	}
	for i, u := range []string{"alice", "bob", "carol", "mallory"} {
		if err := web(u, "wrong", fmt.Sprintf("2001:db8:0:7::%x", i+1)); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	if err := web("dave", testPassword, "2001:db8:0:7:ffff::1"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("a fresh address in the same /64 after 4 failures from it: %v; want rate limited", err)
	}
	if err := web("dave", testPassword, "2001:db8:0:8::1"); err != nil {
		t.Errorf("another /64: %v; want success", err)
	}

	for i, u := range []string{"alice", "bob", "carol", "mallory"} {
		addr := "192.0.2.7"
		if i%2 == 1 {
			addr = "::ffff:192.0.2.7"
		}
		if err := web(u, "wrong", addr); !errors.Is(err, ErrBadCredentials) {
			t.Fatalf("IPv4 failure %d: %v", i+1, err)
		}
	}
	if err := web("dave", testPassword, "192.0.2.7"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("192.0.2.7 after 4 failures, half of them IPv4-mapped: %v; want rate limited", err)
	}
}

// TestFailureStatePruneKeepsRunningLockouts: a flood of new names or
// sources evicts the oldest records whose lockout is not running, never a
// running one, however old its last failure; a table full of running
// lockouts keeps them all.
func TestFailureStatePruneKeepsRunningLockouts(t *testing.T) {
	now := time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC)
	locked := failureRecord{Failures: freeFailures + 7, Last: now.Add(-time.Minute)} // 5 min, 4 left
	s := newFailureState()
	s.Records["root"] = locked
	s.Records["ran-out"] = failureRecord{Failures: freeFailures + 1, Last: now.Add(-time.Minute)} // 5 s, over
	for i := range maxRecords + 10 {
		s.Records[fmt.Sprintf("flood%04d", i)] = failureRecord{Failures: 1, Last: now.Add(time.Duration(i) * time.Millisecond)}
	}
	s.prune(now.Add(time.Second))
	if len(s.Records) != maxRecords {
		t.Fatalf("%d records after prune; want %d", len(s.Records), maxRecords)
	}
	if _, ok := s.Records["root"]; !ok {
		t.Error("a running lockout (the oldest record) was evicted for a flood of new records")
	}
	if _, ok := s.Records["ran-out"]; ok {
		t.Error("a record whose lockout has run out (the oldest) kept; want it evicted first")
	}
	for i := range 11 {
		if _, ok := s.Records[fmt.Sprintf("flood%04d", i)]; ok {
			t.Errorf("flood%04d (among the oldest not locked out) kept", i)
		}
	}

	full := newFailureState()
	for i := range maxRecords + 5 {
		full.Records[fmt.Sprintf("locked%04d", i)] = locked
	}
	full.prune(now)
	if len(full.Records) != maxRecords+5 {
		t.Errorf("a table of %d running lockouts pruned to %d; want none evicted", maxRecords+5, len(full.Records))
	}
}

// TestRateLimitTableFull: with the failed-login table full of running
// lockouts, a web login that needs new records fails closed (rate
// limited, PAM not asked, no lockout evicted); a console's login still
// goes ahead; once a lockout ends its record makes room.
func TestRateLimitTableFull(t *testing.T) {
	h := newHarness(t)
	l := h.a.limiter()
	now := h.clock.Now()
	if err := l.update(context.Background(), now, func(s *failureState) bool {
		for i := range maxRecords {
			// the first two lockouts end in 5 s, the others in 5 min
			r := failureRecord{Failures: freeFailures + 7, Last: now}
			if i < 2 {
				r.Failures = freeFailures + 1
			}
			s.Records[fmt.Sprintf("locked%04d", i)] = r
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		s, err := l.read()
		if err != nil {
			t.Fatal(err)
		}
		return len(s.Records)
	}

	_, err := h.a.Login(context.Background(), "dave", testPassword, WebTTY("192.0.2.7"))
	if got := retryAfter(t, err); got != firstLockout {
		t.Errorf("web login with the table full: RetryAfter %v; want %v (the first lockout's end)", got, firstLockout)
	}
	if h.pam.Calls() != 0 {
		t.Errorf("PAM asked with the table full (%d calls)", h.pam.Calls())
	}
	if got := count(); got != maxRecords {
		t.Errorf("%d records after the refused web login; want the %d lockouts kept", got, maxRecords)
	}
	if !strings.Contains(h.logs.String(), "full of running lockouts") {
		t.Errorf("the full table is not on the logger: %s", h.logs.String())
	}

	if _, err := h.login("dave", testPassword); err != nil {
		t.Errorf("dave on tty1 with the table full: %v; want success", err)
	}
	if _, err := h.login("alice", "wrong"); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("alice on tty1 with the table full: %v; want counted and asked", err)
	}
	if h.failures(t, "alice") != 1 {
		t.Errorf("alice's console failure not counted with the table full")
	}

	// the first two lockouts end: their records (and alice's, not locked
	// out) make room for the web login's two (name and source)
	h.clock.Advance(firstLockout)
	if _, err := h.a.Login(context.Background(), "dave", testPassword, WebTTY("192.0.2.7")); err != nil {
		t.Errorf("web login after a lockout ended: %v; want success", err)
	}
}
