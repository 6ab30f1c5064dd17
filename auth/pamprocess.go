package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/virtcon/virtcon/internal/reexec"
)

// The PAM transaction can run in a child process (Options.PAMProcess):
// the DCUI re-executes itself in helper mode, like unix_chkpwd does for
// pam_unix. PAM modules then never run inside the long-lived console:
// their memory (pam_unix's yescrypt needs ~16 MB for one hash) is given
// back when the child exits, a module that crashes or leaks takes only the
// child with it, and a transaction that outlives its context is killed
// rather than left running.

// pamHelperMode is the helper's child mode (see internal/reexec).
const pamHelperMode = "pam-helper"

func init() {
	reexec.Register(pamHelperMode, func() int { return runPAMHelper(os.Stdin, os.Stdout) })
}

// pamRequest is what the parent writes on the child's stdin (never in
// argv or the environment, which other users can read in /proc).
type pamRequest struct {
	Service  string `json:"service"`
	User     string `json:"user"`
	Password string `json:"password"`
	TTY      string `json:"tty"`
}

// pamResponse is the child's answer on stdout: OK, or the failed step
// classified as in pamError.
type pamResponse struct {
	OK       bool     `json:"ok"`
	Kind     string   `json:"kind,omitempty"` // "bad-credentials", "account", "" (the stack failed)
	Step     string   `json:"step,omitempty"`
	Status   string   `json:"status,omitempty"`
	Messages []string `json:"messages,omitempty"`
}

// runPAMHelper is the helper's child mode (a program that sets
// Options.PAMProcess to itself calls reexec.Init first thing in main): one
// transaction, the request read from in, the answer written to out.
func runPAMHelper(in io.Reader, out io.Writer) int {
	var req pamRequest
	if err := json.NewDecoder(io.LimitReader(in, 64<<10)).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "pam helper: reading the request:", err)
		return 2
	}
	err := realPAM(context.Background(), req.Service, req.User, req.Password, req.TTY)
	req.Password = ""
	resp := pamResponse{OK: err == nil}
	if err != nil {
		var pe *pamError
		if errors.As(err, &pe) {
			resp.Step, resp.Status, resp.Messages = pe.step, fmt.Sprint(pe.status), pe.messages
			switch {
			case errors.Is(pe.kind, ErrBadCredentials):
				resp.Kind = "bad-credentials"
			case errors.Is(pe.kind, ErrAccount):
				resp.Kind = "account"
			}
		} else {
			resp.Step, resp.Status = "run", err.Error()
		}
	}
	if err := json.NewEncoder(out).Encode(resp); err != nil {
		return 1
	}
	return 0
}

// processPAM runs one transaction in the helper program exe.
func processPAM(exe string) func(ctx context.Context, service, user, password, tty string) error {
	return func(ctx context.Context, service, user, password, tty string) error {
		req, err := json.Marshal(pamRequest{Service: service, User: user, Password: password, TTY: tty})
		if err != nil {
			return err
		}
		// a minimal environment (the helper needs nothing of ours), with
		// the mode marker; the request, password and all, goes on stdin
		cmd := reexec.Command(ctx, exe, pamHelperMode, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"})
		cmd.Stdin = bytes.NewReader(req)
		defer clear(req) // the request holds the password
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		runErr := cmd.Run()
		if ctx.Err() != nil {
			return fmt.Errorf("pam: %w", ctx.Err())
		}
		var resp pamResponse
		if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil {
			detail := strings.TrimSpace(stderr.String())
			if runErr != nil {
				detail = runErr.Error() + ": " + detail
			}
			return fmt.Errorf("pam helper %s: no answer (%s)", exe, strings.TrimSpace(detail))
		}
		if resp.OK {
			return nil
		}
		pe := &pamError{step: resp.Step, status: errors.New(resp.Status), messages: resp.Messages}
		switch resp.Kind {
		case "bad-credentials":
			pe.kind = ErrBadCredentials
		case "account":
			pe.kind = ErrAccount
		}
		return pe
	}
}
