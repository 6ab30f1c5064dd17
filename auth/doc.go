// Package auth owns who may act on the host from a console: PAM login
// (Authenticate and AcctMgmt against virtcon's own PAM service), group
// authorisation (root, or a member of the admin group), a rate limit on
// failed logins (per user name, and per source address for the web
// terminal) shared by every console and surviving restarts, the audit
// log of every attempt, the idle auto-lock timer, and the host-wide
// single-writer console lock.
//
// It never stores or logs a password: the password lives only for the PAM
// call, is never put into an error, the audit log or the slog output; nor a
// typed user name that is no account, which may be a password typed into
// the wrong field. It touches only files under the layout's RunDir (lock,
// holder record, failure counters, the key that hashes user names) and
// LogDir (auth.log); PAM configuration in /etc/pam.d belongs to packaging.
// It imports neither cobra nor Bubble Tea.
//
// PAM needs cgo; a build without cgo compiles but every Login fails with
// ErrPAMUnavailable.
package auth
