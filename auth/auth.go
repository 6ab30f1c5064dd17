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
	// (os.Executable()), which must call MaybeRunPAMHelper first thing in
	// main. Empty runs PAM in this process.
	PAMProcess string

	// Test seams; nil means the real implementation.

	// PAM authenticates user with password and runs account management. It
	// returns nil, or an error wrapping ErrBadCredentials (authentication
	// refused) or ErrAccount (account management refused); any other error
	// is a failure of the PAM stack itself.
	PAM func(ctx context.Context, service, user, password string) error
	// LookupGroups returns the names of user's primary and supplementary groups.
	LookupGroups func(user string) ([]string, error)
	// LookupUID returns user's numeric id.
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
// group. The rate limit is applied first: while user is locked out, Login
// returns a *RateLimitError without calling PAM. Every attempt is audited to
// <LogDir>/auth.log and the logger (user, tty, result; never the password).
// tty names the console: "tty1", "ttyS0", "pts/3".
//
// A refused attempt (bad credentials, refused account, not an admin) counts
// as a failure for user; a failure of the machinery (PAM stack broken, ctx
// done, user database unreadable) does not. A success clears user's record.
func (a *Authenticator) Login(ctx context.Context, user, password, tty string) (*Identity, error) {
	if reason := invalidUser(user); reason != "" {
		// Refused before PAM: nothing was guessed, so nothing is counted.
		a.audit(resultBadCredentials, user, tty, reason)
		return nil, fmt.Errorf("login %q: %w", truncate(user), ErrBadCredentials)
	}
	if strings.Contains(a.service, "/") {
		a.audit(resultError, user, tty, "invalid PAM service name")
		return nil, fmt.Errorf("login %q: invalid PAM service name %q", user, a.service)
	}

	if wait, err := a.limiter().check(ctx, user, a.now()); err != nil {
		// The limiter is defence in depth on top of PAM's fail delay; a
		// broken state file must not lock every operator out of the last
		// console of a host.
		a.log.Error("login rate limit unavailable; continuing without it", "err", err)
	} else if wait > 0 {
		rl := &RateLimitError{RetryAfter: wait}
		a.audit(resultRateLimited, user, tty, "retry after "+wait.Round(time.Second).String())
		return nil, fmt.Errorf("login %q: %w", user, rl)
	}

	err := a.pam(ctx, a.service, user, password, tty)
	switch {
	case err == nil:
	case errors.Is(err, ErrBadCredentials):
		a.refused(ctx, resultBadCredentials, user, tty, err.Error())
		// One message for unknown users and wrong passwords: err's detail
		// goes to the audit log only.
		return nil, fmt.Errorf("login %q: %w", user, ErrBadCredentials)
	case errors.Is(err, ErrAccount):
		a.refused(ctx, resultAccount, user, tty, err.Error())
		return nil, fmt.Errorf("login %q: %w", user, err)
	default:
		a.audit(resultError, user, tty, err.Error())
		return nil, fmt.Errorf("login %q: %w", user, err)
	}

	id, err := a.authorise(user)
	if err != nil {
		if errors.Is(err, ErrNotAdmin) {
			a.refused(ctx, resultNotAdmin, user, tty, err.Error())
		} else {
			a.audit(resultError, user, tty, err.Error())
		}
		return nil, fmt.Errorf("login %q: %w", user, err)
	}
	if err := a.limiter().clear(ctx, user); err != nil {
		a.log.Error("login rate limit: clearing the failure record", "user", user, "err", err)
	}
	a.audit(resultSuccess, user, tty, "uid "+strconv.Itoa(id.UID))
	return id, nil
}

// refused audits a refused attempt and counts it against user.
func (a *Authenticator) refused(ctx context.Context, result, user, tty, detail string) {
	if err := a.limiter().fail(ctx, user, a.now()); err != nil {
		a.log.Error("login rate limit: recording a failure", "user", user, "err", err)
	}
	a.audit(result, user, tty, detail)
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

func truncate(u string) string {
	if len(u) > 64 {
		return u[:64] + "..."
	}
	return u
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
