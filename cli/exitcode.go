package cli

import (
	"context"
	"errors"
	"io/fs"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/internal/fielderr"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/vm"
)

// Exit codes, documented in docs/cli.md. This is the one place errors
// become exit codes.
const (
	ExitOK           = 0 // success
	ExitError        = 1 // the operation failed
	ExitUsage        = 2 // bad command line or bad input
	ExitCheckFailed  = 3 // a check reported FAIL
	ExitNotPermitted = 4 // not permitted (needs root or a group)
	ExitCredential   = 5 // the director revoked the node's credential, or it expired: enrol again
	ExitCanceled     = 130
)

// UsageError is a mistake in the command line or its input.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ErrCheckFailed is returned when a command's checks report FAIL; the
// report itself was already printed.
var ErrCheckFailed = errors.New("one or more checks failed")

// ErrNotPermitted marks operations refused for lack of privilege.
var ErrNotPermitted = errors.New("not permitted")

// ExitCode maps an error to the process exit code.
func ExitCode(err error) int {
	var usage *UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &usage), errors.Is(err, fielderr.ErrInvalid),
		// (vm's and netcfg's kinds are fielderr.ErrInvalid too)
		errors.Is(err, vm.ErrInvalid), errors.Is(err, vm.ErrInvalidImage), errors.Is(err, netcfg.ErrInvalid),
		// refused until the user says so (--with-snapshots, --force)
		errors.Is(err, vm.ErrHasSnapshots), errors.Is(err, vm.ErrRestoreRunning):
		return ExitUsage
	case errors.Is(err, vm.ErrSnapshotUnrecorded), errors.Is(err, vm.ErrSnapshotLayout), errors.Is(err, vm.ErrSnapshotShape):
		// refused, and no flag overrides it: the operation cannot be done
		return ExitError
	case errors.Is(err, ErrCheckFailed):
		return ExitCheckFailed
	case errors.Is(err, agent.ErrRevoked), errors.Is(err, agent.ErrExpired):
		return ExitCredential
	case errors.Is(err, ErrNotPermitted), errors.Is(err, fs.ErrPermission):
		return ExitNotPermitted
	case errors.Is(err, context.Canceled):
		return ExitCanceled
	default:
		return ExitError
	}
}
