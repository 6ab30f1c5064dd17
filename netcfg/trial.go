package netcfg

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/virtcon/virtcon/paths"
)

// ErrNotOurTry: the pending try is not the one the caller started (a
// *NotOurTryError says which is pending). Nothing was confirmed or
// rolled back.
var ErrNotOurTry = errors.New("the pending network try is not this one")

// NotOurTryError refuses to confirm or roll back a try on behalf of a
// caller that started another one (the agent's remote trial, after its
// own try ended and someone else's began).
type NotOurTryError struct {
	// Want is the caller's try, Pending the one on record.
	Want, Pending string
}

func (e *NotOurTryError) Error() string {
	return fmt.Sprintf("%v: try %s is pending, not %s", ErrNotOurTry, e.Pending, e.Want)
}

// Is makes errors.Is(err, ErrNotOurTry) true.
func (e *NotOurTryError) Is(target error) bool { return target == ErrNotOurTry }

func ourTry(id string) func(*Pending) error {
	return func(p *Pending) error {
		if p.ID != id {
			return &NotOurTryError{Want: id, Pending: p.ID}
		}
		return nil
	}
}

// ConfirmDesiredTry is ConfirmDesired for the try id only: a pending try
// with another ID is refused (ErrNotOurTry), as is no try at all
// (ErrNoPendingTry: rolled back already) or one past its deadline
// (ErrNotConfirmable).
func ConfirmDesiredTry(ctx context.Context, layout paths.Layout, id string) error {
	if id == "" {
		return fmt.Errorf("confirm: %w: no try id", ErrNotOurTry)
	}
	return confirmDesired(ctx, layout, ourTry(id))
}

// RollbackDesiredTry is RollbackDesired for the try id only: a pending
// try with another ID is left alone (ErrNotOurTry).
func RollbackDesiredTry(ctx context.Context, layout paths.Layout, id string) error {
	if id == "" {
		return fmt.Errorf("rollback: %w: no try id", ErrNotOurTry)
	}
	if err := rollback(ctx, layout, ourTry(id)); err != nil {
		return err
	}
	_ = os.Remove(DesiredPendingFile(layout)) // as RollbackDesired
	return nil
}

// ConfirmDesiredTry confirms the pending try id (ConfirmDesiredTry).
func (s *Service) ConfirmDesiredTry(ctx context.Context, id string) error {
	return ConfirmDesiredTry(ctx, s.layout, id)
}

// RollbackDesiredTry rolls the pending try id back (RollbackDesiredTry).
func (s *Service) RollbackDesiredTry(ctx context.Context, id string) error {
	return RollbackDesiredTry(ctx, s.layout, id)
}
