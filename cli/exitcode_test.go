package cli

import (
	"fmt"
	"testing"

	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/vm"
)

// Bad input of any kind is exit 2: fielderr's errors, and every kind
// made with fielderr.NewKind, wrapped or not.
func TestExitCodeInvalid(t *testing.T) {
	other := fielderr.NewKind("invalid something new")
	tests := []struct {
		name string
		err  error
	}{
		{"a field error", &fielderr.FieldError{Field: "a", Msg: "bad"}},
		{"a list without a kind", &fielderr.ValidationError{Errs: []*fielderr.FieldError{{Field: "a", Msg: "bad"}}}},
		{"a list of a new kind", fielderr.New(other)},
		{"a new kind, wrapped", fmt.Errorf("load: %w: empty file", other)},
		{"vm", fmt.Errorf("%w: empty manifest", vm.ErrInvalid)},
		{"image", &vm.ImageError{Errs: []*vm.FieldError{{Field: "url", Msg: "bad"}}}},
		{"netcfg", fmt.Errorf("%w: empty file", netcfg.ErrInvalid)},
		{"netcfg default-route rule", &netcfg.FieldError{Field: "bridges[0].ports[0]", Kind: netcfg.ErrPortCarriesDefaultRoute}},
	}
	for _, tc := range tests {
		if got := ExitCode(tc.err); got != ExitUsage {
			t.Errorf("%s: ExitCode(%v) = %d; want %d", tc.name, tc.err, got, ExitUsage)
		}
	}
}

// A snapshot refused for what it is (unrecorded, another disk layout) is
// exit 1, like any operation that cannot be done: no flag makes it work.
func TestExitCodeSnapshotRefusals(t *testing.T) {
	for _, err := range []error{
		&vm.SnapshotUnrecordedError{VM: "web", Name: "lost", State: vm.SnapshotUnrecorded},
		&vm.SnapshotLayoutError{VM: "web", Name: "old"},
		&vm.SnapshotShapeError{VM: "web", Name: "mem", Diffs: []string{"memory 1024 MiB now (spec.memoryMiB), 512 MiB in the snapshot"}},
	} {
		if got := ExitCode(fmt.Errorf("wrapped: %w", err)); got != ExitError {
			t.Errorf("ExitCode(%v) = %d; want %d", err, got, ExitError)
		}
	}
}
