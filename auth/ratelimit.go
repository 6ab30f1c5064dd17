package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/flock"
)

// The failed-login policy, per user name (known or not).
const (
	freeFailures   = 3               // consecutive failures that cost nothing beyond PAM's fail delay
	firstLockout   = 5 * time.Second // the wait after the first failure beyond the free ones
	maxLockout     = 5 * time.Minute // the wait never grows beyond this
	forgetFailures = 15 * time.Minute
	// maxRecords bounds the state file when someone tries many names.
	maxRecords = 1024
	// lockWait bounds how long Login waits for another console's
	// read-modify-write of the state file.
	lockWait = 2 * time.Second
)

// retryDelay is how long a user name must wait after its n-th consecutive
// failure: nothing for the first three, then 5 s doubling per further
// failure, capped at 5 min.
func retryDelay(failures int) time.Duration {
	if failures <= freeFailures {
		return 0
	}
	shift := failures - freeFailures - 1
	d := firstLockout
	for range shift {
		d *= 2
		if d >= maxLockout {
			return maxLockout
		}
	}
	return d
}

// failureRecord is one user name's run of consecutive failures.
type failureRecord struct {
	Failures int       `json:"failures"`
	Last     time.Time `json:"last"`
}

// failureState is <RunDir>/auth-failures.json. It lives in the runtime
// directory so that every console process and a restarted dcui share it; a
// reboot clears it.
type failureState struct {
	Version int                      `json:"version"`
	Users   map[string]failureRecord `json:"users"`
}

const failureStateVersion = 1

// wait is how long user must still wait at now.
func (s *failureState) wait(user string, now time.Time) time.Duration {
	r, ok := s.Users[user]
	if !ok {
		return 0
	}
	d := retryDelay(r.Failures)
	left := r.Last.Add(d).Sub(now)
	// A wall clock set back must not stretch a lockout beyond the policy.
	return min(max(left, 0), d)
}

// fail records a failure of user at now.
func (s *failureState) fail(user string, now time.Time) {
	r := s.Users[user]
	r.Failures++
	r.Last = now
	s.Users[user] = r
}

// prune forgets records older than forgetFailures and keeps at most
// maxRecords, the most recent ones. It reports whether it changed anything.
func (s *failureState) prune(now time.Time) bool {
	n := len(s.Users)
	for u, r := range s.Users {
		if now.Sub(r.Last) > forgetFailures {
			delete(s.Users, u)
		}
	}
	if len(s.Users) <= maxRecords {
		return len(s.Users) != n
	}
	names := make([]string, 0, len(s.Users))
	for u := range s.Users {
		names = append(names, u)
	}
	slices.SortFunc(names, func(a, b string) int { return s.Users[b].Last.Compare(s.Users[a].Last) })
	for _, u := range names[maxRecords:] {
		delete(s.Users, u)
	}
	return true
}

// limiter reads and updates the failure state under a flock, so that two
// consoles failing at once both count.
type limiter struct {
	dir string // RunDir
	log *slog.Logger
}

func (l *limiter) statePath() string { return filepath.Join(l.dir, "auth-failures.json") }
func (l *limiter) lockPath() string  { return filepath.Join(l.dir, "auth-failures.lock") }

// check returns how long user must wait before PAM may be asked again.
func (l *limiter) check(ctx context.Context, user string, now time.Time) (time.Duration, error) {
	var wait time.Duration
	err := l.update(ctx, now, func(s *failureState) bool {
		wait = s.wait(user, now)
		return false
	})
	return wait, err
}

func (l *limiter) fail(ctx context.Context, user string, now time.Time) error {
	return l.update(ctx, now, func(s *failureState) bool {
		s.fail(user, now)
		return true
	})
}

func (l *limiter) clear(ctx context.Context, user string) error {
	return l.update(ctx, time.Time{}, func(s *failureState) bool {
		if _, ok := s.Users[user]; !ok {
			return false
		}
		delete(s.Users, user)
		return true
	})
}

// update prunes the state at now (a zero now skips that), runs fn on it
// under the lock, and writes it back when either changed it.
func (l *limiter) update(ctx context.Context, now time.Time, fn func(*failureState) bool) error {
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("failed-login state: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	lk, err := flock.Acquire(ctx, l.lockPath())
	if err != nil {
		return fmt.Errorf("failed-login state: %w", err)
	}
	defer lk.Release()

	s, err := l.read()
	if errors.Is(err, errCorrupt) {
		// Start over rather than disable the limit for good: the next
		// write replaces the file.
		l.log.Warn("failed-login state unreadable; starting afresh", "err", err)
		s, err = newFailureState(), nil
	}
	if err != nil {
		return err
	}
	changed := false
	if !now.IsZero() {
		changed = s.prune(now)
	}
	if !fn(s) && !changed {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("failed-login state: %w", err)
	}
	// RunDir is a tmpfs: an fsync buys nothing.
	return atomicfile.WriteVolatile(l.statePath(), b, 0o600)
}

var errCorrupt = errors.New("corrupt")

func newFailureState() *failureState {
	return &failureState{Version: failureStateVersion, Users: map[string]failureRecord{}}
}

func (l *limiter) read() (*failureState, error) {
	s := newFailureState()
	b, err := os.ReadFile(l.statePath())
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed-login state: %w", err)
	}
	var got failureState
	if err := json.Unmarshal(b, &got); err != nil {
		return nil, fmt.Errorf("failed-login state %s: %w: %w", l.statePath(), errCorrupt, err)
	}
	if got.Version != failureStateVersion {
		return nil, fmt.Errorf("failed-login state %s: %w: version %d, want %d", l.statePath(), errCorrupt, got.Version, failureStateVersion)
	}
	if got.Users != nil {
		s.Users = got.Users
	}
	return s, nil
}
