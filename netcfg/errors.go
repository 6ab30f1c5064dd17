package netcfg

import (
	"errors"
	"fmt"

	"github.com/virtcon/virtcon/internal/fielderr"
)

// ErrInvalid is wrapped by every error about the configuration itself (bad
// input, or a change refused by a safety rule): nothing was applied.
var ErrInvalid = errors.New("invalid network configuration")

// FieldError names the offending field (a path such as bridges[0].ports[1])
// and its value.
type FieldError struct {
	Field string
	Value any
	Msg   string
}

func (e *FieldError) Error() string { return fielderr.Format(e.Field, e.Value, e.Msg) }

// Is makes errors.Is(fe, ErrInvalid) true for a lone FieldError too.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// ValidationError lists every problem found, so one run shows them all.
type ValidationError struct{ Errs []*FieldError }

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, fe := range e.Errs {
		msgs[i] = fe.Error()
	}
	return fielderr.Join(ErrInvalid, msgs)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// StepError is a failed apply step. Everything done before it was reverted;
// RevertErr says what could not be undone (nil when all of it was).
type StepError struct {
	Index     int    // 0-based position in the plan
	Step      string // the step's description
	Err       error
	RevertErr error
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("apply step %d %q: %v", e.Index+1, e.Step, e.Err)
	if e.RevertErr != nil {
		msg += fmt.Sprintf(" (revert incomplete: %v)", e.RevertErr)
	} else {
		msg += " (reverted)"
	}
	return msg
}

// Unwrap gives errors.Is/As both the failure and the revert failure.
func (e *StepError) Unwrap() []error {
	if e.RevertErr == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.RevertErr}
}
