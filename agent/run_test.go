package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
)

// A certificate past its NotAfter here: ErrExpired, the alert, no dial.
func TestRunExpiredLocally(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	enrolled(t, h.Layout, newTestCA(t), time.Now().Add(-31*24*time.Hour), time.Now().Add(-time.Hour))
	var dials atomic.Int64
	err := Run(context.Background(), h, RunOptions{DialContext: countingDial(&dials)})
	if !errors.Is(err, ErrExpired) {
		t.Fatalf("Run with an expired certificate: %v; want ErrExpired", err)
	}
	if dials.Load() != 0 {
		t.Errorf("%d dials; want none", dials.Load())
	}
	s, err := ReadStatus(h.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if s.Alert != AlertExpired || s.Running || !strings.Contains(s.Line(), "EXPIRED") {
		t.Errorf("status %+v, line %q; want the expired alert, not running", s, s.Line())
	}
}

func TestRunNotEnrolled(t *testing.T) {
	t.Parallel()
	if err := Run(context.Background(), testHost(t), RunOptions{}); !errors.Is(err, ErrNotEnrolled) {
		t.Errorf("Run without credentials: %v; want ErrNotEnrolled", err)
	}
}

// A director that is not there: attempts back off (growing waits, the
// record says backoff, the last error and the next retry), and a stop
// ends Run with nil.
func TestRunBacksOff(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	h := testHost(t)
	enrolled(t, h.Layout, newTestCA(t), time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour))
	setDirector(t, h.Layout, addr)
	var dials atomic.Int64
	cancel, done := startRun(t, h, RunOptions{DialContext: countingDial(&dials), MinBackoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond})
	st := waitStatus(t, h, "backing off after a few attempts", 10*time.Second, func(s *Status) bool {
		return s.State == StateBackoff && dials.Load() >= 4
	})
	if !strings.Contains(st.LastError, "connection refused") || st.NextRetry.IsZero() || !st.Running {
		t.Errorf("status %+v; want running, the refusal as last error and a next retry", st)
	}
	cancel()
	select {
	case r := <-done:
		if r.err != nil {
			t.Errorf("Run: %v; want nil after a stop", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	if _, err := os.Stat(AlertFile(h.Layout)); !os.IsNotExist(err) {
		t.Errorf("an unreachable director left an alert: %v", err)
	}
}

func setDirector(t *testing.T, l paths.Layout, addr string) {
	t.Helper()
	c, err := loadConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	c.Director = addr
	b, err := MarshalConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ConfigFile(l), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
