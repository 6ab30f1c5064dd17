package qmp

import (
	"errors"
	"fmt"
)

// Sentinel errors for what callers branch on. They are wrapped with the
// socket path and command; test with errors.Is.
var (
	// ErrUnavailable: nothing accepts connections on the socket (no file,
	// connection refused): QEMU is not running or not listening yet.
	ErrUnavailable = errors.New("monitor unavailable")

	// ErrBusy: the socket accepted the connection but sent no greeting in
	// time, which is what QEMU does while another client holds the monitor.
	ErrBusy = errors.New("monitor busy")

	// ErrTimeout: a command or the handshake got no reply before the
	// deadline. It is joined with context.DeadlineExceeded. A Monitor that
	// timed out is closed, since a late reply may still be on its way.
	ErrTimeout = errors.New("timed out")

	// ErrClosed: the connection is gone: closed by us, or by QEMU (EOF)
	// before the reply arrived.
	ErrClosed = errors.New("monitor connection closed")
)

// CommandError is an error QEMU returned for a command
// ({"error": {"class": ..., "desc": ...}}).
type CommandError struct {
	Command string // the command that failed, e.g. "query-status"
	Class   string // QMP error class, e.g. "GenericError", "CommandNotFound"
	Desc    string // QEMU's human-readable description
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Command, e.Class, e.Desc)
}
