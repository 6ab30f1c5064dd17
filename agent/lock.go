package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/paths"
)

// tryLock takes the agent's lock without waiting: one `run` per host, and
// no enrolment or leave under a running one. Held elsewhere is
// ErrRunning, naming the running agent's pid when its record does.
func tryLock(l paths.Layout) (*flock.Lock, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a done context: flock.Acquire tries once
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
