package directorcli

import (
	"context"
	"errors"
	"io/fs"

	"connectrpc.com/connect"
)

// Exit codes, documented in virt-director --help and docs/director.md
// (virt's, less 3: the director runs no checks). This is the one place
// errors become exit codes.
const (
	ExitOK           = 0 // success
	ExitError        = 1 // the operation failed
	ExitUsage        = 2 // bad command line or bad input
	ExitNotPermitted = 4 // not permitted (the admin socket is root's)
	ExitCanceled     = 130
)

// UsageError is a mistake in the command line or its input.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ErrNotPermitted marks operations refused for lack of privilege.
var ErrNotPermitted = errors.New("not permitted")

// ExitCode maps an error to the process exit code. A director's answer
// keeps its connect code in the chain (wordError wraps, never replaces):
// PermissionDenied and Unauthenticated are not permitted, InvalidArgument
// is bad input, everything else (NotFound, FailedPrecondition,
// Unavailable, ...) is an error.
func ExitCode(err error) int {
	var (
		usage *UsageError
		ce    *connect.Error
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &usage):
		return ExitUsage
	case errors.Is(err, ErrNotPermitted), errors.Is(err, fs.ErrPermission):
		return ExitNotPermitted
	case errors.As(err, &ce):
		switch ce.Code() {
		case connect.CodePermissionDenied, connect.CodeUnauthenticated:
			return ExitNotPermitted
		case connect.CodeInvalidArgument:
			return ExitUsage
		case connect.CodeCanceled:
			return ExitCanceled
		}
		return ExitError
	case errors.Is(err, context.Canceled):
		return ExitCanceled
	default:
		return ExitError
	}
}
