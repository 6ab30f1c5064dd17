package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/paths"
)

// tryLock takes the agent's lock, waiting briefly: one `run` per host, and
// no enrolment or leave under a running one. Held elsewhere is
// ErrRunning, naming the running agent's pid when its record does.
//
// The short wait is not for another agent (a running one holds the lock
// for its life) but for a child any virtcon process forks: until its
// exec, the child holds a copy of every descriptor, the lock's included,
// so a lock released a moment ago can still read as held (seen in CI:
// an enrolment right after another in the same process was refused).
// lockGrace bounds tryLock's wait: far above a fork-to-exec window, far
// below what a person notices.
const lockGrace = 300 * time.Millisecond

func tryLock(l paths.Layout) (*flock.Lock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lockGrace)
	defer cancel()
	lk, err := flock.Acquire(ctx, l.AgentLockFile())
	if err == nil {
		return lk, nil
	}
	if !errors.Is(err, flock.ErrLocked) {
		return nil, fmt.Errorf("agent lock: %w", err)
	}
	if rec, alive, rerr := readRecord(l); rerr == nil && alive {
		return nil, fmt.Errorf("%w (pid %d, lock %s)", ErrRunning, rec.PID, l.AgentLockFile())
	}
	return nil, fmt.Errorf("%w (lock %s is held)", ErrRunning, l.AgentLockFile())
}
