package fielderr

import (
	"errors"
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
