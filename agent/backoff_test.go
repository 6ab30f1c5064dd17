package agent

import (
	"testing"
	"time"
)

func TestBackoffSequence(t *testing.T) {
	t.Parallel()
	mid := func() float64 { return 0.5 } // no jitter
	b := backoff{min: time.Second, max: 120 * time.Second, rand: mid}
	want := []time.Duration{1000, 1600, 2560, 4096, 6554, 10486, 16777, 26844, 42950, 68719, 109951, 120000, 120000}
	for i, w := range want {
		got := b.next().Round(time.Millisecond)
		if got != w*time.Millisecond {
			t.Errorf("wait %d: got %v; want %v", i+1, got, w*time.Millisecond)
		}
	}
	b.reset()
	if got := b.next(); got != time.Second {
		t.Errorf("after reset: got %v; want 1s", got)
	}
}

func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		r        float64
		cur, max time.Duration
		want     time.Duration
	}{
		{0, time.Second, time.Minute, 800 * time.Millisecond},               // -20 %
		{0.999999, time.Second, time.Minute, 1200 * time.Millisecond},       // +20 %
		{0.999999, 110 * time.Second, 120 * time.Second, 120 * time.Second}, // capped
		{0, 120 * time.Second, 120 * time.Second, 96 * time.Second},
	} {
		b := backoff{min: time.Second, max: tt.max, rand: func() float64 { return tt.r }, cur: tt.cur}
		if got := b.next().Round(time.Millisecond); got != tt.want {
			t.Errorf("r=%v cur=%v: got %v; want %v", tt.r, tt.cur, got, tt.want)
		}
	}
	// heartbeats: 10 s ±10 %
	if lo, hi := jitter(10*time.Second, heartbeatJitter, 0), jitter(10*time.Second, heartbeatJitter, 0.999999).Round(time.Millisecond); lo != 9*time.Second || hi != 11*time.Second {
		t.Errorf("heartbeat jitter bounds %v..%v; want 9s..11s", lo, hi)
	}
}
