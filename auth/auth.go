package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/virtcon/virtcon/paths"
)

// Defaults for Options.
const (
	DefaultService = "virtcon"
	DefaultGroup   = "virtcon-admin"
)

// maxUserLen bounds the user name accepted from a console; longer input is
// refused before PAM sees it.
const maxUserLen = 256

// Errors Login returns; callers branch on them with errors.Is.
var (
	// ErrBadCredentials is the one answer for an unknown user and a wrong
	// password alike, so that a console cannot be used to enumerate users.
	ErrBadCredentials = errors.New("unknown user or wrong password")
	// ErrAccount means PAM's account management refused a correctly
	// authenticated user: expired or locked account, password change
	// required, access not allowed at this time...
	ErrAccount = errors.New("account refused")
	// ErrNotAdmin means the user authenticated but is neither root nor a
	// member of the admin group; the returned error names the group.
	ErrNotAdmin = errors.New("not authorised")
	// ErrRateLimited is wrapped in a *RateLimitError carrying how long to wait.
	ErrRateLimited = errors.New("too many failed logins")
	// ErrPAMUnavailable is returned by every Login of a build without cgo.
	ErrPAMUnavailable = errors.New("virtcon was built without cgo: PAM login unavailable")
)

// RateLimitError is returned (wrapped) while a user name is locked out after
// repeated failures; PAM was not called. errors.Is(err, ErrRateLimited) holds.
type RateLimitError struct {
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("%v: try again in %v", ErrRateLimited, e.RetryAfter.Round(time.Second))
}

// Unwrap makes errors.Is(err, ErrRateLimited) work.
func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// Identity is an authenticated and authorised user.
type Identity struct {
	User   string
	UID    int
	Groups []string // names of the primary and supplementary groups
}

// Options configure an Authenticator. The zero value is the production
// configuration.
type Options struct {
	// Service is the PAM service name, default "virtcon" (/etc/pam.d/virtcon).
	Service string
	// Group is the admin group, default "virtcon-admin"; uid 0 is always allowed.
	Group string
	// Now is the wall clock for the rate limit and the audit log (default
	// time.Now). The rate limit is shared between processes through a file,
	// so it cannot use a monotonic clock; a clock that jumps back never
	// lengthens a lockout beyond its policy value.
	Now func() time.Time

	// PAMProcess, when set, is an executable that runs each PAM
	// transaction in a child process: normally the calling program itself
	// (os.Executable()), which must call reexec.Init first thing in main.
	// Empty runs PAM in this process.
	PAMProcess string

	// Test seams; nil means the real implementation.

	// PAM authenticates user with password and runs account management. It
	// returns nil, or an error wrapping ErrBadCredentials (authentication
	// refused) or ErrAccount (account management refused); any other error
	// is a failure of the PAM stack itself.
	PAM func(ctx context.Context, service, user, password string) error
	// LookupGroups returns the names of user's primary and supplementary groups.
	LookupGroups func(user string) ([]string, error)
	// LookupUID returns user's numeric id. An error also tells Login that
	// the name is not a known account (see loginName).
	LookupUID func(user string) (int, error)
}

// Authenticator logs users in on a console. It is safe for concurrent use;
// its shared state lives in files, so several processes (tty1, ttyS0, SSH)
// see the same rate limit.
type Authenticator struct {
	layout       paths.Layout
	log          *slog.Logger
	service      string
	group        string
	now          func() time.Time
	pam          func(ctx context.Context, service, user, password, tty string) error
	lookupGroups func(string) ([]string, error)
	lookupUID    func(string) (int, error)
}

// New returns an Authenticator keeping its state under layout.
func New(layout paths.Layout, log *slog.Logger, opts Options) *Authenticator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{
		layout:       layout,
		log:          log,
		service:      opts.Service,
		group:        opts.Group,
		now:          opts.Now,
		pam:          realPAM,
		lookupGroups: lookupGroups,
		lookupUID:    lookupUID,
	}
	if a.service == "" {
		a.service = DefaultService
	}
	if a.group == "" {
		a.group = DefaultGroup
	}
	if a.now == nil {
		a.now = time.Now
	}
	if opts.PAM != nil {
		p := opts.PAM
		a.pam = func(ctx context.Context, service, user, password, _ string) error {
			return p(ctx, service, user, password)
		}
	} else if opts.PAMProcess != "" {
		a.pam = processPAM(opts.PAMProcess)
	}
	if opts.PAM == nil && !pamServiceInstalled(a.service) {
		// Linux-PAM silently falls back to the "other" service, which is
		// pam_deny on most distributions and the common stacks on Debian.
		log.Warn("PAM service file not installed; PAM falls back to the \"other\" service (see packaging/README.md)",
			"service", a.service, "path", filepath.Join("/etc/pam.d", a.service))
	}
	if opts.LookupGroups != nil {
		a.lookupGroups = opts.LookupGroups
	}
	if opts.LookupUID != nil {
		a.lookupUID = opts.LookupUID
	}
	return a
}

// Service is the PAM service name in use.
func (a *Authenticator) Service() string { return a.service }

// Group is the admin group whose members (besides root) may log in.
func (a *Authenticator) Group() string { return a.group }

// Audit results, as written to auth.log.
const (
	resultAttempt        = "attempt" // written before PAM is asked; the outcome follows
	resultSuccess        = "success"
	resultBadCredentials = "bad-credentials"
	resultAccount        = "account"
	resultNotAdmin       = "not-admin"
	resultRateLimited    = "rate-limited"
	resultError          = "error"
)

// Login authenticates user with password through PAM (Authenticate, then
// AcctMgmt; the conversation answers echo-off prompts with the password and
// echo-on prompts with the user name, and collects the modules' messages),
// then authorises: root, or a member (primary or supplementary) of the admin
// group. tty names the console: "tty1", "ttyS0", "pts/3", or WebTTY(addr)
// for a web login from addr, whose attempts count against that address
// and the name's web record, apart from the name's record on the local
// consoles (see limitKeys).
//
// The rate limit (see retryDelay) is applied before PAM, in one locked step
// that also counts the attempt as a failure: while user is locked out,
// Login returns a *RateLimitError without calling PAM; otherwise the
// failure is on record, and an "attempt" line in the audit log, before PAM
// runs. So parallel attempts cannot all slip past the check while PAM
// runs, and a caller that hangs up during PAM's fail delay (the console
// quits and its PAM helper is killed) has paid for its guess all the same.
// When PAM answers, the attempt is settled:
//
//   - a success clears user's record;
//   - a refusal (bad credentials, refused account, not an admin) leaves the
//     failure counted, once;
//   - a failure of the machinery (PAM stack broken, PAM helper dead without
//     an answer, user database unreadable) takes the failure back, unless
//     ctx is done: a caller that gave up, whether it hung up or ran out of
//     time, may have done so to dodge the verdict, so its attempt counts.
//
// Every attempt is audited to <LogDir>/auth.log and the logger (user, tty,
// result; never the password). A name that is not a known account is
// recorded as "UNKNOWN:" and a short keyed hash of it (it may be a password
// typed into the wrong field), and Login's errors name the user only once
// PAM has accepted the password.
func (a *Authenticator) Login(ctx context.Context, user, password, tty string) (*Identity, error) {
	n, keyErr := a.loginName(ctx, user)
	if reason := invalidUser(user); reason != "" {
		// Refused before PAM: nothing was guessed, so nothing is counted.
		a.audit(resultBadCredentials, n.shown, tty, reason)
		return nil, fmt.Errorf("login: %w", ErrBadCredentials)
	}
	if strings.Contains(a.service, "/") {
		a.audit(resultError, n.shown, tty, "invalid PAM service name")
		return nil, fmt.Errorf("login: invalid PAM service name %q", a.service)
	}

	counted := false
	limitErr := keyErr
	var keys []string // the failure records this attempt counts against
	if limitErr == nil {
		keys, limitErr = a.limitKeys(ctx, n, tty)
	}
	if limitErr == nil {
		var wait time.Duration
		var full bool
		wait, full, limitErr = a.limiter().beginKeys(ctx, a.now(), isWeb(tty), keys...)
		if limitErr == nil && wait > 0 {
			rl := &RateLimitError{RetryAfter: wait}
			detail := "retry after " + wait.Round(time.Second).String()
			if full {
				// fail closed: making room would lift a running lockout
				detail = "failed-login table full of running lockouts; " + detail
				a.log.Warn("login rate limit: the failed-login table is full of running lockouts; refusing new web logins",
					"max", maxRecords, "tty", tty)
			}
			a.audit(resultRateLimited, n.shown, tty, detail)
			return nil, fmt.Errorf("login: %w", rl)
		}
		counted = limitErr == nil
	}
	if limitErr != nil {
		// The limiter is defence in depth on top of PAM's fail delay; a
		// broken state file must not lock every operator out of the last
		// console of a host.
		a.log.Error("login rate limit unavailable; continuing without it", "user", n.shown, "err", limitErr)
		a.audit(resultAttempt, n.shown, tty, "asking PAM; not counted: rate limit unavailable")
	} else {
		a.audit(resultAttempt, n.shown, tty, "asking PAM; counted as a failure unless it succeeds")
	}

	err := a.pam(ctx, a.service, user, password, tty)
	switch {
	case err == nil:
	case errors.Is(err, ErrBadCredentials):
		a.audit(resultBadCredentials, n.shown, tty, err.Error())
		// One message for unknown users and wrong passwords, without the
		// name: err's detail goes to the audit log only.
		return nil, fmt.Errorf("login: %w", ErrBadCredentials)
	case errors.Is(err, ErrAccount):
		a.audit(resultAccount, n.shown, tty, err.Error())
		return nil, fmt.Errorf("login %q: %w", user, err)
	default:
		a.machineryFailed(ctx, n, keys, counted, tty, err)
		return nil, fmt.Errorf("login: %w", err)
	}

	id, err := a.authorise(user)
	if err != nil {
		if errors.Is(err, ErrNotAdmin) {
			a.audit(resultNotAdmin, n.shown, tty, err.Error())
		} else {
			a.machineryFailed(ctx, n, keys, counted, tty, err)
		}
		return nil, fmt.Errorf("login %q: %w", user, err)
	}
	if len(keys) > 0 {
		// Settle even when the caller has just given up: the password was right.
		if err := a.limiter().clear(context.WithoutCancel(ctx), keys...); err != nil {
			a.log.Error("login rate limit: clearing the failure record", "user", n.shown, "err", err)
		}
	}
	a.audit(resultSuccess, n.shown, tty, "uid "+strconv.Itoa(id.UID))
	return id, nil
}

// machineryFailed audits an attempt that ended in a failure of the
// machinery and takes back the failure counted for it, unless ctx is done:
// then the caller may have walked away from the verdict on purpose.
func (a *Authenticator) machineryFailed(ctx context.Context, n loginName, keys []string, counted bool, tty string, err error) {
	detail := err.Error()
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if counted {
			detail += " (counted as a failure: the caller gave up)"
		}
	} else if counted {
		if uerr := a.limiter().undo(ctx, keys...); uerr != nil {
			a.log.Error("login rate limit: taking back a failure", "user", n.shown, "err", uerr)
		}
	}
	a.audit(resultError, n.shown, tty, detail)
}

// authorise looks user up after PAM accepted it.
func (a *Authenticator) authorise(name string) (*Identity, error) {
	uid, err := a.lookupUID(name)
	if err != nil {
		return nil, fmt.Errorf("look up user: %w", err)
	}
	groups, err := a.lookupGroups(name)
	if err != nil {
		return nil, fmt.Errorf("look up groups: %w", err)
	}
	if uid != 0 && !slices.Contains(groups, a.group) {
		return nil, fmt.Errorf("%w: not root and not a member of group %q", ErrNotAdmin, a.group)
	}
	return &Identity{User: name, UID: uid, Groups: groups}, nil
}

// WebTTY is the tty a web login from the source address addr passes to
// Login ("web:192.0.2.7"): the rate limit counts its attempts against the
// address too, and the audit log records the address as the source.
func WebTTY(addr string) string { return webTTYPrefix + addr }

const webTTYPrefix = "web:"

// SourceOf is the source address a tty names (WebTTY), or "" for a
// console without one (tty1, pts/3).
func SourceOf(tty string) string {
	addr, ok := strings.CutPrefix(tty, webTTYPrefix)
	if !ok {
		return ""
	}
	return addr
}

// isWeb reports whether tty is a web login's (WebTTY), whatever its address.
func isWeb(tty string) bool { return strings.HasPrefix(tty, webTTYPrefix) }

// limitKeys are the failure records an attempt by n on tty checks and
// counts against. A local console (tty1, ttyS0, pts/3) has the typed
// name's record alone. A web login has the name's web record and its
// source address's instead, and never the local one: guesses from the
// network must not lock root out of the physical console, the last way
// into a broken host, and failures on a console do not slow the web.
func (a *Authenticator) limitKeys(ctx context.Context, n loginName, tty string) ([]string, error) {
	if !isWeb(tty) {
		return []string{n.key}, nil
	}
	k, err := a.limiter().sourceKey(ctx, SourceOf(tty))
	if err != nil {
		return nil, err
	}
	return []string{n.webKey, k}, nil
}

func (a *Authenticator) limiter() *limiter {
	return &limiter{dir: a.layout.RunDir(), log: a.log}
}

// invalidUser says why a typed user name is refused before PAM, or "".
func invalidUser(u string) string {
	switch {
	case u == "":
		return "empty user name"
	case len(u) > maxUserLen:
		return "user name too long"
	case strings.ContainsFunc(u, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }):
		return "user name contains control characters or invalid UTF-8"
	}
	return ""
}

func lookupUID(name string) (int, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return 0, fmt.Errorf("user %q: uid %q: %w", name, u.Uid, err)
	}
	return uid, nil
}

func lookupGroups(name string) ([]string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("user %q: groups: %w", name, err)
	}
	if !slices.Contains(gids, u.Gid) {
		gids = append([]string{u.Gid}, gids...)
	}
	var names []string
	for _, gid := range gids {
		g, err := user.LookupGroupId(gid)
		if err != nil {
			// A gid without a name cannot be the admin group; skip it.
			continue
		}
		names = append(names, g.Name)
	}
	return names, nil
}

// pamServiceInstalled reports whether a service file exists where
// Linux-PAM looks for it.
func pamServiceInstalled(service string) bool {
	if service == "" || strings.Contains(service, "/") {
		return false
	}
	for _, dir := range []string{"/etc/pam.d", "/usr/lib/pam.d"} {
		if _, err := os.Stat(filepath.Join(dir, service)); err == nil {
			return true
		}
	}
	return false
}
