package qmp

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestDialEventsInOrder(t *testing.T) {
	names := []string{"STOP", "RESUME", "POWERDOWN", "RESET", "SHUTDOWN"}
	f := startFake(t, func(c *fakeConn) {
		if c.negotiate() != nil {
			return
		}
		for i, name := range names {
			c.event(name, map[string]any{"i": i})
		}
	})
	s, err := DialEvents(context.Background(), f.path, Options{})
	if err != nil {
		t.Fatalf("DialEvents: %v", err)
	}
	defer s.Close()
	var got []string
	timeout := time.After(2 * time.Second)
	for done := false; !done; {
		select {
		case e, ok := <-s.C():
			if !ok {
				done = true
				break
			}
			got = append(got, e.Event)
		case <-timeout:
			t.Fatalf("timed out; got %v so far", got)
		}
	}
	if len(got) != len(names) {
		t.Fatalf("got events %v; want %v", got, names)
	}
	for i := range names {
		if got[i] != names[i] {
			t.Errorf("event %d: got %s; want %s", i, got[i], names[i])
		}
	}
	if s.Dropped() != 0 {
		t.Errorf("Dropped() = %d; want 0", s.Dropped())
	}
	// The fake hung up after the last event.
	if err := s.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("Err() = %v; want ErrClosed", err)
	}
}

func TestDialEventsSlowConsumer(t *testing.T) {
	const (
		buffer = 8
		total  = 5000
	)
	written := make(chan time.Duration, 1)
	f := startFake(t, func(c *fakeConn) {
		if c.negotiate() != nil {
			return
		}
		start := time.Now()
		for i := range total {
			if c.event("BLOCK_JOB_PENDING", map[string]any{"i": i}) != nil {
				return
			}
		}
		written <- time.Since(start)
		c.waitClosed()
	})
	s, err := DialEvents(context.Background(), f.path, Options{EventBuffer: buffer})
	if err != nil {
		t.Fatalf("DialEvents: %v", err)
	}
	defer s.Close()

	// Nobody reads C: the server must still get all its events out.
	select {
	case d := <-written:
		t.Logf("server wrote %d events in %v", total, d)
	case <-time.After(5 * time.Second):
		t.Fatalf("server blocked writing events to a stream nobody reads")
	}
	deadline := time.Now().Add(2 * time.Second)
	for s.Dropped() < total-buffer && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got, want := s.Dropped(), uint64(total-buffer); got != want {
		t.Errorf("Dropped() = %d; want %d", got, want)
	}
	// The newest events are kept, in order.
	for want := total - buffer; want < total; want++ {
		e := <-s.C()
		if got := int(e.Data["i"].(float64)); got != want {
			t.Errorf("kept event i=%d; want %d", got, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, ok := <-s.C(); ok {
		t.Errorf("C still open after Close")
	}
	if err := s.Err(); err != nil {
		t.Errorf("Err() after Close = %v; want nil", err)
	}
}

func TestDialEventsErrors(t *testing.T) {
	f := startFake(t, (*fakeConn).waitClosed)
	_, err := DialEvents(context.Background(), f.path, Options{Timeout: 100 * time.Millisecond})
	assertIs(t, err, ErrBusy)
	_, err = DialEvents(context.Background(), f.path+".missing", Options{})
	assertIs(t, err, ErrUnavailable)
}

func TestEventStreamNoLeak(t *testing.T) {
	f := startFake(t, func(c *fakeConn) {
		if c.negotiate() == nil {
			c.event("STOP", nil)
			c.waitClosed()
		}
	})
	before := runtime.NumGoroutine()
	for range 5 {
		s, err := DialEvents(context.Background(), f.path, Options{})
		if err != nil {
			t.Fatalf("DialEvents: %v", err)
		}
		<-s.C()
		s.Close()
		s.Close()
	}
	waitGoroutines(t, before)
}
