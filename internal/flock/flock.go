package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned when the lock is still held at the deadline.
var ErrLocked = errors.New("locked by another virtcon process")

// Lock is a held lock.
type Lock struct {
	f         *os.File
	path      string
	onRelease []func()
}

// Acquire takes an exclusive lock on path, waiting until ctx is done.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	delay := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &Lock{f: f, path: path}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w (%w)", path, ErrLocked, ctx.Err())
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// Release drops the lock. The lock file stays: removing it would let two
// processes lock two different inodes under one name.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	// before the lock is free: nothing of this process may still take it
	// for held once another process can hold it
	for _, f := range l.onRelease {
		f()
	}
	l.onRelease = nil
	err := l.f.Close()
	l.f = nil
	return err
}

// OnRelease registers f to run when the lock is released, just before it
// is free (a record of this process of the locks it holds).
func (l *Lock) OnRelease(f func()) {
	if l != nil && l.f != nil {
		l.onRelease = append(l.onRelease, f)
	}
}
