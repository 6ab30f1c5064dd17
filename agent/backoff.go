package agent

import "time"

// Reconnection backoff, as gRPC's connection backoff: the first wait is
// MinBackoff, each next one 1.6 times the last, up to MaxBackoff; each
// is jittered by ±20 % (and never above MaxBackoff), so that agents cut
// off together do not come back together. Registered resets it.
const (
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 120 * time.Second
	backoffFactor     = 1.6
	backoffJitter     = 0.2
	heartbeatJitter   = 0.1
)

type backoff struct {
	min, max time.Duration
	rand     func() float64 // [0,1)
	cur      time.Duration  // 0: next is the first
}

// next is the wait before the next attempt.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	}
	d := jitter(b.cur, backoffJitter, b.rand())
	b.cur = min(time.Duration(float64(b.cur)*backoffFactor), b.max)
	return min(d, b.max)
}

func (b *backoff) reset() { b.cur = 0 }

// jitter spreads d uniformly over d×(1-f) to d×(1+f) by r in [0,1).
func jitter(d time.Duration, f, r float64) time.Duration {
	return time.Duration(float64(d) * (1 - f + 2*f*r))
}
