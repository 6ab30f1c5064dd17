package netcfg

// While a try is pending nothing else changes the network, and a try whose
// watchdog died is rolled back by whoever notices it first.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/paths"
)

// TryPendingError refuses a change of the network while a try is pending:
// a change made under a try would be on top of the trial, and the
// rollback (which knows only the snapshot and the record of the try)
// would leave it behind, unknown to applied.yaml. errors.Is(err,
// ErrTryPending) is true; the caller says how to confirm or roll back.
type TryPendingError struct {
	ID       string
	Deadline time.Time
	// Expired: the deadline has passed and the watchdog is rolling the
	// try back (or its rollback failed: RollbackError).
	Expired       bool
	RollbackError string
	// Err is set when the record could not be read: the change is refused
	// all the same (fail closed), ID and Deadline are empty.
	Err error
}

func (e *TryPendingError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("%v (its record cannot be read: %v), so the network is not changed", ErrTryPending, e.Err)
	case e.RollbackError != "":
		return fmt.Sprintf("%v: rolling back try %s failed (%s)", ErrTryPending, e.ID, e.RollbackError)
	case e.Expired:
		return fmt.Sprintf("%v: the deadline %s of try %s has passed and its watchdog is rolling it back",
			ErrTryPending, e.Deadline.Local().Format(time.RFC3339), e.ID)
	}
	return fmt.Sprintf("%v: try %s rolls back at %s unless confirmed", ErrTryPending, e.ID, e.Deadline.Local().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrTryPending) true.
func (e *TryPendingError) Is(target error) bool { return target == ErrTryPending }

// Unwrap gives the read error, if any.
func (e *TryPendingError) Unwrap() error { return e.Err }

// CheckNoPendingTry returns a *TryPendingError while a try of layout is
// pending (or its record exists but cannot be read), else nil. Apply and
// ApplyDesired enforce it themselves; callers use it to refuse before
// they start editing.
func CheckNoPendingTry(layout paths.Layout) error { return checkNoPendingTry(PendingPath(layout)) }

func checkNoPendingTry(path string) error {
	p, err := tryRead(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return &TryPendingError{Err: err}
	}
	return &TryPendingError{ID: p.ID, Deadline: p.Deadline, Expired: !time.Now().Before(p.Deadline), RollbackError: p.RollbackError}
}

// tryApplyKey marks the context of a try's own apply (tryRun), which
// holds the apply lock and is the one change a pending try allows.
type tryApplyKey struct{}

func withTryApply(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, tryApplyKey{}, id)
}

func isTryApply(ctx context.Context) bool {
	id, _ := ctx.Value(tryApplyKey{}).(string)
	return id != ""
}

// applyLockWait bounds the wait for another apply.
const applyLockWait = time.Minute

// applyLock takes the lock that serialises applies (and a try's snapshot
// and apply) per host root.
func applyLock(ctx context.Context, layout paths.Layout) (unlock func(), err error) {
	return applyLockFor(ctx, layout, applyLockWait)
}

func applyLockFor(ctx context.Context, layout paths.Layout, wait time.Duration) (unlock func(), err error) {
	lctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	l, err := flock.Acquire(lctx, filepath.Join(layout.RunDir(), "locks", "network-apply.lock"))
	if err != nil {
		return nil, err
	}
	return func() { _ = l.Release() }, nil
}

// wdLiveness is what can be told of a try's watchdog process.
type wdLiveness int

const (
	// wdUnknown: it cannot be told (no permission to look); a watchdog
	// that may be alive is never pre-empted.
	wdUnknown wdLiveness = iota
	wdAlive
	wdDead
)

// otherBoot reports whether the record was written in an earlier boot.
func (p *Pending) otherBoot() bool {
	if p.BootID == "" {
		return false
	}
	cur := proc.BootID()
	return cur != "" && cur != p.BootID
}

// watchdogLiveness tells whether the record's watchdog is alive. A PID is
// the watchdog's only if it is of this boot, started when the record says
// (a reused PID started later), is not a zombie and has this try's ID in
// its environment; why says, for a dead one, what was found.
func (p *Pending) watchdogLiveness() (live wdLiveness, why string) {
	if p.otherBoot() {
		return wdDead, "it began before the host last booted"
	}
	pid := p.WatchdogPID
	if pid <= 0 {
		return wdDead, "it has no watchdog"
	}
	gone := func(err error) bool { return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) }
	exited := fmt.Sprintf("its watchdog (pid %d) has exited", pid)
	st, err := proc.ReadStat(pid)
	switch {
	case gone(err):
		return wdDead, exited
	case err != nil:
		return wdUnknown, ""
	case st.Gone():
		return wdDead, exited
	case p.WatchdogStart != 0 && st.Start != p.WatchdogStart:
		return wdDead, exited + " (pid " + strconv.Itoa(pid) + " is another process now)"
	}
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	switch {
	case gone(err):
		return wdDead, exited
	case err != nil:
		return wdUnknown, ""
	case !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+wdIDEnv+"="+p.ID+"\x00")):
		// a zombie's environment reads empty too
		return wdDead, exited + " (pid " + strconv.Itoa(pid) + " is another process now)"
	}
	return wdAlive, ""
}

// ResolvedTry is a pending try that ResolveExpiredTry rolled back (or
// tried to: see its error).
type ResolvedTry struct {
	ID       string    `json:"id"`
	Deadline time.Time `json:"deadline"`
	// Links are the links the rollback restored.
	Links []string `json:"links"`
	// Why its watchdog did not roll it back, e.g. "its watchdog (pid 4242)
	// has exited".
	Why string `json:"why"`
	// At is when it was rolled back.
	At time.Time `json:"at"`
}

// ErrTryBusy: ResolveExpiredTry found the locks of the network try (or
// of an apply) held past its wait: another virtcon process is confirming,
// rolling back or applying right now, or hangs doing so. It means "not
// now": nothing was done, and the caller goes on and looks again later.
var ErrTryBusy = errors.New("the network try is busy in another virtcon process")

// resolveLockWait bounds the wait for the apply lock and the try lock
// together: their holder (an apply under way, a try's own caller
// overrunning its deadline, `virt net rollback`, another caller resolving
// the same try) deals with the try itself, and a front end that looks at
// the network every few seconds must not hang behind one that hangs.
const resolveLockWait = 10 * time.Second

// ResolveExpiredTry rolls back a pending try that nobody else will: its
// deadline has passed (or it began before the last boot), its watchdog is
// not alive (killed, or gone with the boot) and no rollback of it has
// failed. It returns nil, nil when there is no such try: none pending, one
// still within its deadline (confirm needs no watchdog), one whose
// watchdog lives or may live (a live watchdog is never pre-empted; it
// rolls back itself), or one whose rollback failed already (its record
// carries RollbackError): that one is retried only by an explicit `virt
// net rollback`, never here, since the restore that failed (links, DHCP
// clients stopped and started again) would be redone, and fail again, on
// every look. A record that cannot be read is an error, and nothing is
// done.
//
// Every front end calls it when it looks at the network (each `virt net`
// command, the DCUI's status screen, and once it exists `virt host
// boot`), so that a dead watchdog costs the operator a late rollback, not
// a lost one. It works in the caller's network namespace, under the apply
// lock and the try lock, and reads the record again under them: of two
// callers at once one rolls back, the other finds nothing. It waits for
// the locks until ctx ends or resolveLockWait has passed, then returns
// ErrTryBusy ("not now"). A failed rollback returns the try and the
// error, and leaves the record with the error, for `virt net rollback`.
func ResolveExpiredTry(ctx context.Context, log *slog.Logger, layout paths.Layout) (*ResolvedTry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path := PendingPath(layout)
	// The common case, nothing pending or a live try, takes no lock.
	if p, err := tryRead(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("resolve an expired network try: %w", err)
	} else if _, ok := p.orphaned(time.Now()); !ok {
		return nil, nil
	}
	lctx, cancel := context.WithTimeout(ctx, resolveLockWait)
	defer cancel()
	unlockApply, err := applyLockFor(lctx, layout, resolveLockWait)
	if errors.Is(err, flock.ErrLocked) {
		return nil, fmt.Errorf("resolve an expired network try: %w: an apply holds %w", ErrTryBusy, err)
	} else if err != nil {
		return nil, fmt.Errorf("resolve an expired network try: %w", err)
	}
	defer unlockApply()
	unlock, err := tryLockCtx(lctx, path)
	if err != nil {
		return nil, fmt.Errorf("resolve an expired network try: %w", err)
	}
	defer unlock()
	p, err := tryRead(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // rolled back (or confirmed) meanwhile
	} else if err != nil {
		return nil, fmt.Errorf("resolve an expired network try: %w", err)
	}
	why, ok := p.orphaned(time.Now())
	if !ok {
		return nil, nil
	}
	r := &ResolvedTry{ID: p.ID, Deadline: p.Deadline, Why: why}
	for _, l := range p.Snapshot.Links {
		r.Links = append(r.Links, l.Name)
	}
	log.Info("network try expired and nothing rolls it back: rolling back", "id", p.ID,
		"deadline", p.Deadline.Format(time.RFC3339), "why", why, "links", p.Snapshot.linkNames())
	if err := p.restore(context.WithoutCancel(ctx), log, path); err != nil {
		p.RollbackError = err.Error()
		if werr := tryWrite(path, p); werr != nil {
			log.Error("network try: cannot record the failed rollback", "id", p.ID, "err", werr)
		}
		return r, fmt.Errorf("roll back expired network try %s: %w", p.ID, err)
	}
	if err := tryRemove(path); err != nil {
		return r, fmt.Errorf("roll back expired network try %s: restored, but %w", p.ID, err)
	}
	r.At = time.Now()
	log.Info("network try rolled back", "id", p.ID, "links", p.Snapshot.linkNames())
	return r, nil
}

// orphaned reports whether the try is due for a rollback that its
// watchdog will not do, and why not. A try whose rollback failed is not:
// it waits for `virt net rollback` (see ResolveExpiredTry).
func (p *Pending) orphaned(now time.Time) (string, bool) {
	if p.RollbackError != "" || (now.Before(p.Deadline) && !p.otherBoot()) {
		return "", false
	}
	live, why := p.watchdogLiveness()
	return why, live == wdDead
}
