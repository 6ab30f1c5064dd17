package auth

import (
	"sync"
	"time"
)

// DefaultIdleTimeout is how long the DCUI stays unlocked without a key press.
const DefaultIdleTimeout = 5 * time.Minute

// IdleTimer tells when a logged-in console has been idle too long.
//
// It measures on the monotonic clock: it keeps the time.Time that
// time.Now returned at the last Touch and asks time.Since, which subtracts
// the monotonic readings, never wall-clock times. Setting the system clock
// (by hand, NTP, or a host whose RTC was wrong at boot) can neither lock a
// console early nor keep it unlocked forever.
//
// Expired does not latch: a Touch after expiry starts a new idle period. A
// console must therefore check Expired before it treats a key press as
// activity, and lock when it is true. Safe for concurrent use.
type IdleTimer struct {
	mu      sync.Mutex
	timeout time.Duration
	last    time.Time
	now     func() time.Time // time.Now; a test seam
}

// NewIdleTimer returns a timer that expires after timeout without a Touch;
// a timeout <= 0 means DefaultIdleTimeout. The idle period starts now.
func NewIdleTimer(timeout time.Duration) *IdleTimer {
	return newIdleTimer(timeout, time.Now)
}

func newIdleTimer(timeout time.Duration, now func() time.Time) *IdleTimer {
	if timeout <= 0 {
		timeout = DefaultIdleTimeout
	}
	return &IdleTimer{timeout: timeout, last: now(), now: now}
}

// Touch records activity: the idle period starts again.
func (t *IdleTimer) Touch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = t.now()
}

// Expired reports whether the timeout has passed since the last Touch.
func (t *IdleTimer) Expired() bool { return t.Remaining() == 0 }

// Remaining is the time left before expiry, 0 once expired.
func (t *IdleTimer) Remaining() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Sub uses the monotonic readings of both times (see the type's doc).
	return max(t.timeout-t.now().Sub(t.last), 0)
}

// Timeout is the idle period the timer was made with.
func (t *IdleTimer) Timeout() time.Duration { return t.timeout }
