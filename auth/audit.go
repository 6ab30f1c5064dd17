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

// AuditRecord is one line of <LogDir>/auth.log. It never holds a password.
type AuditRecord struct {
	Time    string `json:"time"` // RFC 3339
	Service string `json:"service"`
	User    string `json:"user"`
	TTY     string `json:"tty"`
	Result  string `json:"result"` // success, bad-credentials, account, not-admin, rate-limited, error
	Detail  string `json:"detail,omitempty"`
}

// audit appends one attempt to the audit log and logs it. An audit log that
// cannot be written is reported on the logger but does not refuse the
// login: the console is the last way into a broken host.
func (a *Authenticator) audit(result, user, tty, detail string) {
	if len(user) > maxUserLen {
		user = user[:maxUserLen] + "..."
	}
	rec := AuditRecord{
		Time:    a.now().Format(time.RFC3339),
		Service: a.service,
		User:    user,
		TTY:     tty,
		Result:  result,
		Detail:  detail,
	}
	attrs := []any{"user", user, "tty", tty, "service", a.service, "result", result}
	if detail != "" {
		attrs = append(attrs, "detail", detail)
	}
	if result == resultSuccess {
		a.log.Info("login", attrs...)
	} else {
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
