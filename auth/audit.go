package auth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// AuditFile is the name of the audit log under the layout's LogDir.
const AuditFile = "auth.log"

// AuditRecord is one line of <LogDir>/auth.log. It never holds a password,
// nor a typed name that is not a known account (see loginName).
type AuditRecord struct {
	Time    string `json:"time"` // RFC 3339
	Service string `json:"service"`
	User    string `json:"user"` // the account's name, or "UNKNOWN:<hash>"
	TTY     string `json:"tty"`
	// Source is the address a web login came from (SourceOf the tty).
	Source string `json:"source,omitempty"`
	// Result is "attempt", written before PAM is asked, then the outcome:
	// success, bad-credentials, account, not-admin, error; or rate-limited
	// alone (PAM was not asked). An attempt without an outcome is a console
	// that died while PAM ran; it was counted as a failure.
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
}

// audit appends one step of an attempt to the audit log and logs it; user
// is loginName.shown. An audit log that cannot be written is reported on
// the logger but does not refuse the login: the console is the last way
// into a broken host.
func (a *Authenticator) audit(result, user, tty, detail string) {
	rec := AuditRecord{
		Time:    a.now().Format(time.RFC3339),
		Service: a.service,
		User:    user,
		TTY:     tty,
		Source:  SourceOf(tty),
		Result:  result,
		Detail:  detail,
	}
	attrs := []any{"user", user, "tty", tty, "service", a.service, "result", result}
	if rec.Source != "" {
		attrs = append(attrs, "source", rec.Source)
	}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	switch result {
	case resultSuccess:
		a.log.Info("login", attrs...)
	case resultAttempt:
		a.log.Info("login attempt", attrs...)
	default:
		a.log.Warn("login refused", attrs...)
	}
	if err := a.appendAudit(rec); err != nil {
		a.log.Error("audit log not written", "err", err)
	}
}

func (a *Authenticator) appendAudit(rec AuditRecord) error {
	dir := a.layout.LogDir()
	path := filepath.Join(dir, AuditFile)
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("audit %s: %w", path, err)
	}
	line = append(line, '\n')
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("audit %s: %w", path, err)
	}
	// O_APPEND and one write per record: lines from several consoles never interleave.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit %s: %w", path, err)
	}
	if _, err := f.Write(line); err != nil {
		f.Close()
		return fmt.Errorf("audit %s: %w", path, err)
	}
	return f.Close()
}
