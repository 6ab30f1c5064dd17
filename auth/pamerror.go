package auth

import (
	"fmt"
	"strings"
)

// pamError is a failed PAM step, classified for Login: kind is
// ErrBadCredentials, ErrAccount or nil (the stack itself failed). Its text
// is for the audit log, and for the operator when kind is ErrAccount (the
// modules' messages say why the account was refused); Login never shows it
// for ErrBadCredentials.
type pamError struct {
	kind     error
	step     string // "start", "authenticate", "account", ...
	status   error  // PAM's status
	messages []string
}

func (e *pamError) Error() string {
	var b strings.Builder
	if e.kind != nil {
		fmt.Fprintf(&b, "%v: ", e.kind)
	}
	fmt.Fprintf(&b, "pam %s: %v", e.step, e.status)
	if len(e.messages) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(e.messages, " "))
	}
	return b.String()
}

func (e *pamError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.status}
	}
	return []error{e.kind, e.status}
}
