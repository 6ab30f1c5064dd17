package netcfg

import (
	"fmt"

	"github.com/virtcon/virtcon/internal/fielderr"
)

// ErrInvalid is wrapped by every error about the configuration itself (bad
// input, or a change refused by a safety rule): nothing was applied. It is
// errors.Is fielderr.ErrInvalid too, like every kind of bad input.
var ErrInvalid = fielderr.NewKind("invalid network configuration")

// The default-route rule's problems, for a face to word (each names the
// way it lifts the rule: the CLI's --try, the DCUI's trial). Both are
// errors.Is ErrNeedsTry and ErrInvalid.
var (
	// ErrNeedsTry: the change could cut the host off, so only a try,
	// which rolls back by itself unless confirmed, may make it (Validate
	// and Apply with AllowDefaultRouteChange).
	ErrNeedsTry = fielderr.NewKind("the change could cut the host off: only a try may make it", ErrInvalid)
	// ErrPortCarriesDefaultRoute: a bridge would enslave the interface
	// that carries the host's default route (Validate).
	ErrPortCarriesDefaultRoute = fielderr.NewKind("a bridge port carries the host's default route", ErrNeedsTry)
	// ErrChangesDefaultRoute: a step of the plan would move or remove the
	// host's default route (Apply).
	ErrChangesDefaultRoute = fielderr.NewKind("the change moves or removes the host's default route", ErrNeedsTry)
)

// FieldError names the offending field (a path such as bridges[0].ports[1])
// and its value. netcfg's carry Kind ErrInvalid (or a narrower kind), so a
// lone FieldError is errors.Is ErrInvalid too.
type FieldError = fielderr.FieldError

// ValidationError lists every problem found, so one run shows them all;
// netcfg's have Kind ErrInvalid.
type ValidationError = fielderr.ValidationError

// fieldErr is a FieldError of kind ErrInvalid.
func fieldErr(field string, value any, msg string) *FieldError {
	return &FieldError{Field: field, Value: value, Msg: msg, Kind: ErrInvalid}
}

// invalid is a ValidationError of kind ErrInvalid.
func invalid(errs []*FieldError) *ValidationError { return fielderr.New(ErrInvalid, errs...) }

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

// riskErr is a FieldError of the default-route rule for a plan's step
// (kind ErrChangesDefaultRoute).
func riskErr(field string, value any, msg string) *FieldError {
	return &FieldError{Field: field, Value: value, Msg: msg, Kind: ErrChangesDefaultRoute}
}
