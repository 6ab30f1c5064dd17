package fielderr

import (
	"errors"
	"fmt"
	"testing"
)

func TestFormat(t *testing.T) {
	tests := []struct {
		field string
		value any
		msg   string
		want  string
	}{
		{"spec.name", "a,b", "must be a name", `spec.name: must be a name (got "a,b")`},
		{"spec.cpus", -1, "must be at least 1", "spec.cpus: must be at least 1 (got -1)"},
		{"spec", nil, "nothing to boot", "spec: nothing to boot"},
	}
	for _, tc := range tests {
		if got := Format(tc.field, tc.value, tc.msg); got != tc.want {
			t.Errorf("Format(%q, %v, %q) = %q; want %q", tc.field, tc.value, tc.msg, got, tc.want)
		}
	}
	if got, want := Join(errors.New("invalid thing"), []string{"a: x", "b: y"}), "invalid thing: a: x; b: y"; got != want {
		t.Errorf("Join = %q; want %q", got, want)
	}
}

func TestErrorText(t *testing.T) {
	kind := NewKind("invalid thing")
	fe := &FieldError{Field: "spec.cpus", Value: -1, Msg: "must be at least 1"}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"field error", fe, "spec.cpus: must be at least 1 (got -1)"},
		{"field error with a kind", &FieldError{Field: "a", Value: "x", Msg: "bad", Kind: kind}, `a: bad (got "x")`},
		{"list", New(kind, fe, &FieldError{Field: "spec", Msg: "nothing to boot"}),
			"invalid thing: spec.cpus: must be at least 1 (got -1); spec: nothing to boot"},
		{"list without a kind", &ValidationError{Errs: []*FieldError{fe}}, "invalid input: spec.cpus: must be at least 1 (got -1)"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%s: Error() = %q; want %q", tc.name, got, tc.want)
		}
	}
}

// Every field error, list and kind is ErrInvalid; a list is its own kind
// and not another's, nor its problems' kinds; a problem alone is its Kind.
func TestIs(t *testing.T) {
	vmKind, netKind := NewKind("invalid virtual machine"), NewKind("invalid network configuration")
	narrow := NewKind("needs a try", netKind)
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"kind is ErrInvalid", vmKind, ErrInvalid, true},
		{"wrapped kind is ErrInvalid", fmt.Errorf("%w: empty file", vmKind), ErrInvalid, true},
		{"wrapped kind is the kind", fmt.Errorf("%w: empty file", vmKind), vmKind, true},
		{"kind is not another kind", vmKind, netKind, false},
		{"narrow kind is its parent", narrow, netKind, true},
		{"narrow kind is ErrInvalid", narrow, ErrInvalid, true},
		{"parent is not the narrow kind", netKind, narrow, false},
		{"field error is ErrInvalid", &FieldError{Field: "a"}, ErrInvalid, true},
		{"field error without a kind is no kind", &FieldError{Field: "a"}, vmKind, false},
		{"field error is its kind", &FieldError{Field: "a", Kind: netKind}, netKind, true},
		{"field error is its kind's parent", &FieldError{Field: "a", Kind: narrow}, netKind, true},
		{"field error is not another kind", &FieldError{Field: "a", Kind: netKind}, vmKind, false},
		{"wrapped field error is its kind", fmt.Errorf("reset: %w", &FieldError{Field: "a", Kind: netKind}), netKind, true},
		{"list is ErrInvalid", New(vmKind), ErrInvalid, true},
		{"list is its kind", New(vmKind), vmKind, true},
		{"list is not another kind", New(vmKind), netKind, false},
		{"list is not its problems' kinds", New(vmKind, &FieldError{Field: "a", Kind: netKind}), netKind, false},
		{"list without a kind is ErrInvalid", &ValidationError{}, ErrInvalid, true},
		{"list without a kind is no kind", &ValidationError{}, vmKind, false},
	}
	for _, tc := range tests {
		if got := errors.Is(tc.err, tc.target); got != tc.want {
			t.Errorf("%s: errors.Is(%v, %v) = %t; want %t", tc.name, tc.err, tc.target, got, tc.want)
		}
	}
	var ve *ValidationError
	if err := fmt.Errorf("apply: %w", New(vmKind, &FieldError{Field: "a"})); !errors.As(err, &ve) || len(ve.Errs) != 1 || ve.Kind != vmKind {
		t.Errorf("errors.As(%v, *ValidationError) = %v; want the list", err, ve)
	}
	var fe *FieldError
	if errors.As(New(vmKind, &FieldError{Field: "a"}), &fe) {
		t.Errorf("errors.As(list, *FieldError) = %v; want false (a list does not unwrap to its problems)", fe)
	}
}
