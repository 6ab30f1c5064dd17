package agent

import (
	"context"
	"errors"
	"fmt"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/vm"
)

// failureOf maps a host service's error onto a task failure: one switch,
// as cli/exitcode.go is for the CLI. The message is the error's own text
// (the same words `virt` prints); field errors travel as fields.
func failureOf(err error) *taskFailure {
	var (
		tf *taskFailure
		ve *fielderr.ValidationError
		fe *fielderr.FieldError
	)
	f := &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_HOST_ERROR, Message: err.Error()}
	switch {
	case errors.As(err, &tf):
		return tf
	case errors.Is(err, vm.ErrChecksum):
		f.Reason = directorv1.TaskFailureReason_TASK_FAILURE_REASON_CHECKSUM_MISMATCH
	case errors.As(err, &ve):
		f.Reason = directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT
		for _, e := range ve.Errs {
			f.Fields = append(f.Fields, fieldOf(e))
		}
	case errors.As(err, &fe):
		f.Reason = directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT
		f.Fields = []*directorv1.FieldError{fieldOf(fe)}
	case errors.Is(err, fielderr.ErrInvalid):
		f.Reason = directorv1.TaskFailureReason_TASK_FAILURE_REASON_INVALID_ARGUMENT
	case errors.Is(err, vm.ErrNotFound), errors.Is(err, vm.ErrNotOurs), errors.Is(err, netcfg.ErrNoPendingTry):
		f.Reason = directorv1.TaskFailureReason_TASK_FAILURE_REASON_NOT_FOUND
	case errors.Is(err, vm.ErrExists), errors.Is(err, vm.ErrRunning), errors.Is(err, vm.ErrInUse), errors.Is(err, vm.ErrAmbiguous),
		errors.Is(err, vm.ErrNotRunning), errors.Is(err, vm.ErrConsoleBusy), errors.Is(err, netcfg.ErrTryPending), errors.Is(err, netcfg.ErrTryBusy):
		f.Reason = directorv1.TaskFailureReason_TASK_FAILURE_REASON_CONFLICT
	case errors.Is(err, context.DeadlineExceeded):
		f.Reason = directorv1.TaskFailureReason_TASK_FAILURE_REASON_DEADLINE_EXCEEDED
	}
	return f
}

func fieldOf(e *fielderr.FieldError) *directorv1.FieldError {
	fe := &directorv1.FieldError{Field: e.Field, Message: e.Msg}
	if e.Value != nil {
		fe.Value = fmt.Sprint(e.Value)
	}
	return fe
}
