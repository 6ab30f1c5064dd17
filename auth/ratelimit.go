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

// The failed-login policy, per user name (known or not), and for a web
// login per source address as well (see SourceOf): an address that fails
// against many names is locked out like one name failed from many places.
// Web logins count against a name's web record, never the one the local
// consoles check (see Authenticator.limitKeys): the network cannot lock
// root out of tty1.
//
// Every attempt that reaches PAM is counted as a failure before PAM is
// asked, in the same locked read-modify-write that checks the wait (see
// limiter.begin): parallel attempts cannot all pass the check while PAM
// runs, and a caller that hangs up during PAM's fail delay (the console
// quits, its PAM helper is killed) has still paid for its guess. Login then
// settles the attempt: a success clears the record, a refusal leaves the
// failure in place, and a failure of the machinery with the caller still
// waiting takes it back (limiter.undo).
const (
	freeFailures   = 3               // consecutive failures that cost nothing beyond PAM's fail delay
	firstLockout   = 5 * time.Second // the wait after the first failure beyond the free ones
	maxLockout     = 5 * time.Minute // the wait never grows beyond this
	forgetFailures = 15 * time.Minute
	// maxRecords bounds the state file when someone tries many names or
	// sources; records whose lockout runs are never evicted for room
	// (see failureState.evict).
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

// failureRecord is one user name's run of consecutive failures (attempts
// still in PAM included).
type failureRecord struct {
	Failures int       `json:"failures"`
	Last     time.Time `json:"last"`
}

// failureState is <RunDir>/auth-failures.json. It lives in the runtime
// directory so that every console process and a restarted dcui share it; a
// reboot clears it. Records are keyed by loginName.key, a keyed hash of the
// name as typed, never by the name: a password typed into the User field
// must not end up in a file.
type failureState struct {
	Version int                      `json:"version"`
	Records map[string]failureRecord `json:"records"`
}

// failureStateVersion 2 keys records by a hash of the name; version 1 (raw
// names) is read as corrupt and replaced.
const failureStateVersion = 2

// wait is how long the name with record key must still wait at now.
func (s *failureState) wait(key string, now time.Time) time.Duration {
	r, ok := s.Records[key]
	if !ok {
		return 0
	}
	d := retryDelay(r.Failures)
	left := r.Last.Add(d).Sub(now)
	// A wall clock set back must not stretch a lockout beyond the policy.
	return min(max(left, 0), d)
}

// fail records a failure of key at now.
func (s *failureState) fail(key string, now time.Time) {
	r := s.Records[key]
	r.Failures++
	r.Last = now
	s.Records[key] = r
}

// undo takes back one failure of key, if a success has not cleared the
// record meanwhile. Last stays: other attempts may have set it since.
func (s *failureState) undo(key string) bool {
	r, ok := s.Records[key]
	if !ok {
		return false
	}
	if r.Failures <= 1 {
		delete(s.Records, key)
		return true
	}
	r.Failures--
	s.Records[key] = r
	return true
}

// prune forgets records older than forgetFailures and keeps at most
// maxRecords (see evict). It reports whether it changed anything.
func (s *failureState) prune(now time.Time) bool {
	n := len(s.Records)
	s.evict(now, maxRecords)
	return len(s.Records) != n
}

// evict brings the table down to at most limit records: it forgets those
// older than forgetFailures, then, while still above limit, the oldest
// whose lockout is not running, never one named in keep (an attempt's
// own records). A record whose lockout is still running is never evicted,
// or a flood of new names or sources would lift root's lockout. It
// reports whether the table is now within limit.
func (s *failureState) evict(now time.Time, limit int, keep ...string) bool {
	for k, r := range s.Records {
		if now.Sub(r.Last) > forgetFailures && !slices.Contains(keep, k) {
			delete(s.Records, k)
		}
	}
	if len(s.Records) <= limit {
		return true
	}
	var idle []string // evictable: not locked out now, not kept
	for k := range s.Records {
		if s.wait(k, now) == 0 && !slices.Contains(keep, k) {
			idle = append(idle, k)
		}
	}
	slices.SortFunc(idle, func(a, b string) int { return s.Records[a].Last.Compare(s.Records[b].Last) })
	for _, k := range idle {
		if len(s.Records) <= limit {
			break
		}
		delete(s.Records, k)
	}
	return len(s.Records) <= limit
}

// firstUnlock is how long until the first running lockout ends at now,
// at least a second (the wait a web login gets while the table is full of
// running lockouts).
func (s *failureState) firstUnlock(now time.Time) time.Duration {
	first := maxLockout
	for k := range s.Records {
		if w := s.wait(k, now); w > 0 {
			first = min(first, w)
		}
	}
	return max(first, time.Second)
}

// limiter reads and updates the failure state under a flock, so that two
// consoles failing at once both count.
type limiter struct {
	dir string // RunDir
	log *slog.Logger
}

func (l *limiter) statePath() string { return filepath.Join(l.dir, "auth-failures.json") }
func (l *limiter) lockPath() string  { return filepath.Join(l.dir, "auth-failures.lock") }

// begin is the one locked step before PAM: it returns how long the name
// with record key must still wait and, when that is nothing, records the
// attempt as a failure straight away. Checking and counting in one step is
// what keeps parallel attempts from all passing the check while PAM runs,
// and counting before PAM is what makes a hang-up during PAM's fail delay
// cost as much as a wrong answer.
func (l *limiter) begin(ctx context.Context, key string, now time.Time) (time.Duration, error) {
	wait, _, err := l.beginKeys(ctx, now, false, key)
	return wait, err
}

// beginKeys is begin for an attempt that counts against several records
// at once (the name's web record and the source address of a web login):
// the wait is the longest of theirs, and an attempt that may go ahead is
// counted against every one, in the same locked step.
//
// When the attempt needs new records and the table has no room for them,
// even after evicting every record not locked out, the table is full of
// running lockouts. Then a web attempt (web) fails closed: full is true
// and wait is how long until the first lockout ends. A console's attempt
// is counted all the same, beyond maxRecords: the console is the last way
// into the host, and its records come at the pace of a person typing.
func (l *limiter) beginKeys(ctx context.Context, now time.Time, web bool, keys ...string) (wait time.Duration, full bool, err error) {
	err = l.update(ctx, now, func(s *failureState) bool {
		for _, k := range keys {
			wait = max(wait, s.wait(k, now))
		}
		if wait > 0 {
			return false
		}
		fresh := 0
		for _, k := range keys {
			if _, ok := s.Records[k]; !ok {
				fresh++
			}
		}
		if fresh > 0 && !s.evict(now, maxRecords-fresh, keys...) && web {
			full, wait = true, s.firstUnlock(now)
			return true // evict may have forgotten some
		}
		for _, k := range keys {
			s.fail(k, now)
		}
		return true
	})
	return wait, full, err
}

// undo takes back the failure begin recorded, for an attempt that the
// machinery, not the caller, cut short.
func (l *limiter) undo(ctx context.Context, keys ...string) error {
	return l.update(ctx, time.Time{}, func(s *failureState) bool {
		changed := false
		for _, k := range keys {
			changed = s.undo(k) || changed
		}
		return changed
	})
}

// clear forgets the keys' failures after a success.
func (l *limiter) clear(ctx context.Context, keys ...string) error {
	return l.update(ctx, time.Time{}, func(s *failureState) bool {
		changed := false
		for _, k := range keys {
			if _, ok := s.Records[k]; ok {
				delete(s.Records, k)
				changed = true
			}
		}
		return changed
	})
}

// update prunes the state at now (a zero now skips that), runs fn on it
// under the lock, and writes it back when either changed it.
func (l *limiter) update(ctx context.Context, now time.Time, fn func(*failureState) bool) error {
	return l.locked(ctx, func() error {
		s, err := l.read()
		changed := false
		if errors.Is(err, errCorrupt) {
			// Start over rather than disable the limit for good, and
			// rewrite now: a version 1 file holds names as typed.
			l.log.Warn("failed-login state unreadable; starting afresh", "err", err)
			s, err, changed = newFailureState(), nil, true
		}
		if err != nil {
			return err
		}
		if !now.IsZero() && s.prune(now) {
			changed = true
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
	})
}

// locked runs fn holding the lock of the failed-login state, waiting at
// most lockWait for it.
func (l *limiter) locked(ctx context.Context, fn func() error) error {
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
	return fn()
}

var errCorrupt = errors.New("corrupt")

func newFailureState() *failureState {
	return &failureState{Version: failureStateVersion, Records: map[string]failureRecord{}}
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
	if got.Records != nil {
		s.Records = got.Records
	}
	return s, nil
}
