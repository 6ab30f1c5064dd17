package auth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
		s.Users[fmt.Sprintf("u%04d", i)] = failureRecord{Failures: 1, Last: now.Add(time.Duration(i) * time.Millisecond)}
	}
	s.Users["old"] = failureRecord{Failures: 9, Last: now.Add(-forgetFailures - time.Second)}
	s.prune(now.Add(time.Second))
	if len(s.Users) != maxRecords {
		t.Fatalf("%d records after prune; want %d", len(s.Users), maxRecords)
	}
	if _, ok := s.Users["old"]; ok {
		t.Error("a record older than 15 min survived")
	}
	for i := range 10 {
		if _, ok := s.Users[fmt.Sprintf("u%04d", i)]; ok {
			t.Errorf("u%04d (among the oldest) kept; want the most recent records kept", i)
		}
	}
	if _, ok := s.Users[fmt.Sprintf("u%04d", maxRecords+9)]; !ok {
		t.Error("the newest record was dropped")
	}
}

// Two consoles failing at the same time must both be counted.
func TestRateLimitConcurrentFailures(t *testing.T) {
	h := newHarness(t)
	l := h.a.limiter()
	done := make(chan error)
	for range 8 {
		go func() { done <- l.fail(context.Background(), "alice", h.clock.Now()) }()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	s, err := l.read()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Users["alice"].Failures; got != 8 {
		t.Errorf("failures = %d; want 8", got)
	}
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}
