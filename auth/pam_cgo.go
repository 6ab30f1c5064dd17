//go:build cgo

package auth

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/msteinert/pam/v2"
)

// PAMAvailable reports whether this build can call PAM (it needs cgo).
const PAMAvailable = true

// Bounds on what the conversation keeps of the modules' messages.
const (
	maxPAMMessages  = 8
	maxPAMMessageLn = 200
)

// realPAM runs one PAM transaction. PAM calls cannot be interrupted: when
// ctx is done first, realPAM returns and the transaction finishes in the
// background (its result is dropped).
func realPAM(ctx context.Context, service, user, password, tty string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pam: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- pamTransaction(service, user, password, tty) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("pam: %w", ctx.Err())
	}
}

// pamTransaction authenticates and checks the account. No session is opened
// and no credentials are set: the console only needs to know who is there.
func pamTransaction(service, user, password, tty string) (err error) {
	// Some modules keep per-thread state; keep the transaction on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	c := &conversation{user: user, password: password}
	tx, err := pam.StartFunc(service, user, c.respond)
	if err != nil {
		return &pamError{step: "start", status: err}
	}
	defer func() {
		if endErr := tx.End(); endErr != nil && err == nil {
			err = &pamError{step: "end", status: endErr}
		}
	}()
	for _, it := range pamItems(tty) {
		if err := tx.SetItem(it.item, it.value); err != nil {
			return &pamError{step: it.step, status: err}
		}
	}
	// DisallowNullAuthtok: an account with an empty password does not get
	// the host's console, whatever nullok says in common-auth.
	if err := tx.Authenticate(pam.DisallowNullAuthtok); err != nil {
		return classifyPAM("authenticate", err, c.messages)
	}
	if err := tx.AcctMgmt(pam.DisallowNullAuthtok); err != nil {
		return classifyPAM("account", err, c.messages)
	}
	// Authorisation looks up the name we were given; a module that mapped
	// it to another account would make that check about the wrong user.
	if got, err := tx.GetItem(pam.User); err != nil {
		return &pamError{step: "get user", status: err}
	} else if got != user {
		return &pamError{step: "authenticate", status: fmt.Errorf("PAM changed the user name to %q, which virtcon does not support", got)}
	}
	return nil
}

// pamItem is one item a transaction sets before Authenticate.
type pamItem struct {
	item  pam.Item
	value string
	step  string // names a failure to set it
}

// pamItems are the items a transaction on tty sets: PAM_TTY, and for a
// web login (WebTTY) PAM_RHOST, its source address, for modules that
// judge where a login comes from (pam_access "from" fields, the rhost=
// that fail2ban reads in pam_unix's failure lines). The helper process
// derives it from the tty it is given, so its request needs nothing more.
func pamItems(tty string) []pamItem {
	var items []pamItem
	if tty != "" {
		items = append(items, pamItem{pam.Tty, tty, "set tty"})
	}
	if rhost := SourceOf(tty); rhost != "" {
		items = append(items, pamItem{pam.Rhost, rhost, "set rhost"})
	}
	return items
}

// conversation answers PAM's prompts for one transaction.
type conversation struct {
	user, password string
	messages       []string
}

func (c *conversation) respond(s pam.Style, msg string) (string, error) {
	switch s {
	case pam.PromptEchoOff:
		return c.password, nil
	case pam.PromptEchoOn:
		return c.user, nil
	case pam.ErrorMsg, pam.TextInfo:
		msg = strings.TrimSpace(msg)
		if msg != "" && len(c.messages) < maxPAMMessages {
			if len(msg) > maxPAMMessageLn {
				msg = msg[:maxPAMMessageLn] + "..."
			}
			c.messages = append(c.messages, msg)
		}
		return "", nil
	default:
		return "", fmt.Errorf("unsupported PAM conversation style %d", s)
	}
}

// classifyPAM turns a PAM status of a step into ErrBadCredentials,
// ErrAccount, or a plain failure of the stack.
func classifyPAM(step string, err error, msgs []string) error {
	var status pam.Error
	if !errors.As(err, &status) {
		return &pamError{step: step, status: err, messages: msgs}
	}
	var kind error
	switch step {
	case "authenticate":
		switch status {
		case pam.ErrAuth, pam.ErrUserUnknown, pam.ErrCredInsufficient, pam.ErrMaxtries, pam.ErrPermDenied:
			kind = ErrBadCredentials
		}
	case "account":
		switch status {
		case pam.ErrAcctExpired, pam.ErrNewAuthtokReqd, pam.ErrAuthtokExpired, pam.ErrPermDenied,
			pam.ErrAuth, pam.ErrUserUnknown, pam.ErrMaxtries:
			kind = ErrAccount
		}
	}
	return &pamError{kind: kind, step: step, status: err, messages: msgs}
}
