package fielderr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalid is bad input of any kind: every FieldError and
// ValidationError is errors.Is it, and so is every kind made by NewKind
// (and every error that wraps one).
var ErrInvalid = errors.New("invalid input")

// NewKind returns the sentinel of one kind of bad input, e.g. "invalid
// virtual machine". errors.Is(kind, ErrInvalid) is true, so an error that
// wraps it (fmt.Errorf("%w: empty file", kind)) is ErrInvalid too; with
// parent, it is errors.Is parent as well (a narrower kind).
func NewKind(msg string, parent ...error) error {
	return &kind{msg: msg, parents: parent}
}

type kind struct {
	msg     string
	parents []error
}

func (k *kind) Error() string { return k.msg }

// Is makes errors.Is(k, ErrInvalid) true.
func (k *kind) Is(target error) bool { return target == ErrInvalid }

// Unwrap gives the parents, for errors.Is.
func (k *kind) Unwrap() []error { return k.parents }

// FieldError is one problem: the field (a path such as
// bridges[0].ports[1] or spec.cpus), its value (nil: not shown) and what
// is wrong with it.
type FieldError struct {
	Field string
	Value any
	Msg   string
	// Kind, when set, classifies the problem by itself: errors.Is(fe, k)
	// holds for k and what k wraps. netcfg's FieldErrors carry its kind,
	// so one returned alone is errors.Is netcfg.ErrInvalid; vm's reach the
	// caller inside a ValidationError, which carries the kind. A problem a
	// face words in its own way carries a narrower kind it branches on.
	Kind error
}

func (e *FieldError) Error() string { return Format(e.Field, e.Value, e.Msg) }

// Is makes errors.Is(fe, ErrInvalid) true, and errors.Is(fe, fe.Kind).
func (e *FieldError) Is(target error) bool {
	return target == ErrInvalid || (e.Kind != nil && errors.Is(e.Kind, target))
}

// ValidationError lists every problem found, after its kind's message:
// "invalid virtual machine: spec.cpus: ...; spec.memoryMiB: ...".
type ValidationError struct {
	// Kind is the kind of bad input (NewKind); nil reads as ErrInvalid.
	Kind error
	Errs []*FieldError
}

// New returns a ValidationError of kind listing errs.
func New(kind error, errs ...*FieldError) *ValidationError {
	return &ValidationError{Kind: kind, Errs: errs}
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, fe := range e.Errs {
		msgs[i] = fe.Error()
	}
	return Join(e.kind(), msgs)
}

// Is makes errors.Is(err, ErrInvalid) true, and errors.Is(err, e.Kind).
// The problems listed are not unwrapped: a list is of its own kind, not
// of each problem's.
func (e *ValidationError) Is(target error) bool {
	return target == ErrInvalid || (e.Kind != nil && errors.Is(e.Kind, target))
}

func (e *ValidationError) kind() error {
	if e.Kind == nil {
		return ErrInvalid
	}
	return e.Kind
}

// Format renders one problem: "spec.cpus: must be at least 1 (got -1)".
// A nil value is left out.
func Format(field string, value any, msg string) string {
	if value == nil {
		return fmt.Sprintf("%s: %s", field, msg)
	}
	return fmt.Sprintf("%s: %s (got %s)", field, msg, quote(value))
}

func quote(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// Join renders a list of problems after kind's message, e.g.
// "invalid virtual machine: spec.cpus: ...; spec.memoryMiB: ...".
func Join(kind error, problems []string) string {
	return kind.Error() + ": " + strings.Join(problems, "; ")
}
