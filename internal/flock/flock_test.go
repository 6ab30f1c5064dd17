package flock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestExclusive(t *testing.T) {
	p := filepath.Join(t.TempDir(), "locks", "a.lock")
	l1, err := Acquire(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, p); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Acquire = %v; want ErrLocked", err)
	}
	done := make(chan error, 1)
	go func() {
		l2, err := Acquire(context.Background(), p)
		if err == nil {
			l2.Release()
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	l1.Release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("waiter did not get the lock after release")
	}
}
