package auth

import (
	"strings"
	"testing"
	"time"
)

func TestIdleTimer(t *testing.T) {
	clock := newFakeClock()
	timer := newIdleTimer(5*time.Minute, clock.Now)
	steps := []struct {
		advance       time.Duration
		touch         bool
		wantRemaining time.Duration
	}{
		{0, false, 5 * time.Minute},
		{4*time.Minute + 59*time.Second, false, time.Second},
		{time.Second, false, 0}, // expires exactly at the timeout
		{time.Hour, false, 0},   // and stays expired
		{0, true, 5 * time.Minute},
		{2 * time.Minute, true, 5 * time.Minute}, // activity restarts the period
		{3 * time.Minute, false, 2 * time.Minute},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		if s.touch {
			timer.Touch()
		}
		if got := timer.Remaining(); got != s.wantRemaining {
			t.Errorf("step %d: Remaining = %v; want %v", i, got, s.wantRemaining)
		}
		if got, want := timer.Expired(), s.wantRemaining == 0; got != want {
			t.Errorf("step %d: Expired = %v; want %v", i, got, want)
		}
	}
}

func TestIdleTimerDefault(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if got := NewIdleTimer(d).Timeout(); got != DefaultIdleTimeout {
			t.Errorf("NewIdleTimer(%v).Timeout() = %v; want %v", d, got, DefaultIdleTimeout)
		}
	}
	if DefaultIdleTimeout != 5*time.Minute {
		t.Errorf("DefaultIdleTimeout = %v; the DCUI's documented default is 5m", DefaultIdleTimeout)
	}
}

// The real timer keeps time.Now's monotonic reading and expires on it.
func TestIdleTimerRealClock(t *testing.T) {
	timer := NewIdleTimer(30 * time.Millisecond)
	if !strings.Contains(timer.last.String(), "m=+") {
		t.Errorf("last activity %v carries no monotonic reading", timer.last)
	}
	if timer.Expired() {
		t.Fatal("expired at once")
	}
	time.Sleep(50 * time.Millisecond)
	if !timer.Expired() {
		t.Fatalf("not expired after 50ms of a 30ms timeout (remaining %v)", timer.Remaining())
	}
	timer.Touch()
	if timer.Expired() || timer.Remaining() <= 0 {
		t.Error("still expired after Touch")
	}
}
