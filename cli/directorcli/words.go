package directorcli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"connectrpc.com/connect"
)

// remoteError is a director's answer (or the failure to reach one) in
// the CLI's words; the connect error stays in the chain for ExitCode.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// wordError words an admin call's error: what the operator can do about
// it, in virt-director's commands. op says what was asked ("token
// revoke abc").
func (e *Env) wordError(op string, err error) error {
	var ce *connect.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	msg := ce.Message()
	if msg == "" {
		msg = ce.Code().String()
	}
	sock := e.Socket()
	switch ce.Code() {
	case connect.CodeUnavailable:
		_, serr := os.Stat(sock)
		switch {
		case errors.Is(serr, fs.ErrNotExist):
			msg = fmt.Sprintf("director not running (no socket at %s)", sock)
		case errors.Is(serr, fs.ErrPermission), errors.Is(err, fs.ErrPermission):
			return &remoteError{msg: fmt.Sprintf("%s: %s: permission denied (the admin socket is root's: run it with sudo)", op, sock),
				err: fmt.Errorf("%w: %w", ErrNotPermitted, err)}
		case errors.Is(err, syscall.ECONNREFUSED):
			msg = fmt.Sprintf("director not running (nothing listens on %s)", sock)
		default:
			msg = fmt.Sprintf("director on %s unavailable: %s", sock, msg)
		}
		return &remoteError{msg: msg, err: err}
	case connect.CodePermissionDenied, connect.CodeUnauthenticated:
		msg += " (the admin socket takes root or the director's own user: run it with sudo)"
	case connect.CodeNotFound:
		msg += hintList(op)
	case connect.CodeFailedPrecondition:
		if strings.HasPrefix(op, "node forget ") {
			msg += " (only a Revoked or Offline node is forgotten: virt-director node revoke it first)"
		}
	}
	return &remoteError{msg: op + ": " + msg, err: err}
}

// hintList points at the list that names what was not found.
func hintList(op string) string {
	switch {
	case strings.HasPrefix(op, "token "):
		return " (virt-director token list)"
	case strings.HasPrefix(op, "node "), strings.HasPrefix(op, "task run "), strings.HasPrefix(op, "vm "):
		return " (virt-director node list)"
	case strings.HasPrefix(op, "task "):
		return " (virt-director task list)"
	}
	return ""
}
