package netcfg

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/paths"
)

// Errors of the try workflow, for callers to branch on.
var (
	// ErrNoPendingTry: nothing to confirm, roll back or show.
	ErrNoPendingTry = errors.New("no network try is pending")
	// ErrTryPending: a try is pending; confirm it or roll it back first.
	// Every change of the network is refused meanwhile (a *TryPendingError
	// says which try and its deadline).
	ErrTryPending = errors.New("a network try is pending")
	// ErrDeadlineTooShort: the try's deadline would not cover STP
	// convergence and verification.
	ErrDeadlineTooShort = errors.New("try deadline too short")
	// ErrNotConfirmable: the pending try can no longer be kept: its
	// deadline passed (the watchdog rolls it back) or a rollback of it
	// failed, which only an explicit rollback retries (a
	// *NotConfirmableError says which).
	ErrNotConfirmable = errors.New("the network try can no longer be kept")
)

// DeadlineTooShortError refuses a try whose deadline would not cover STP
// convergence and applying and verifying: errors.Is(err,
// ErrDeadlineTooShort). A face says how to ask for Min or longer.
type DeadlineTooShortError struct {
	// Got is the deadline asked for.
	Got time.Duration
	// Min is the shortest deadline accepted, rounded up to a second.
	Min time.Duration
	// STP is the part of Min that STP convergence on the bridges involved
	// takes (2 × forward delay); 0 when no bridge has STP.
	STP time.Duration
	// Margin is the part of Min for applying and verifying (TryMargin).
	Margin time.Duration
}

func (e *DeadlineTooShortError) Error() string {
	if e.STP > 0 {
		return fmt.Sprintf("%v: a try of %v is shorter than %v: STP on the bridges involved takes %v (2 × forward delay) before ports forward, plus %v to apply and verify",
			ErrDeadlineTooShort, e.Got, e.Min, e.STP, e.Margin)
	}
	return fmt.Sprintf("%v: a try of %v is shorter than the %v needed to apply and verify", ErrDeadlineTooShort, e.Got, e.Min)
}

// Is makes errors.Is(err, ErrDeadlineTooShort) true.
func (e *DeadlineTooShortError) Is(target error) bool { return target == ErrDeadlineTooShort }

// TryOverrunError is a try whose apply and verify succeeded, but took
// until its deadline: no time was left to confirm it, so it was rolled
// back as a failure. A face may suggest a longer try.
type TryOverrunError struct{ Deadline time.Time }

func (e *TryOverrunError) Error() string {
	return fmt.Sprintf("apply and verify took until the deadline %s", e.Deadline.Local().Format(time.RFC3339))
}

// NotConfirmableError refuses to keep a try: a rollback of it failed
// (RollbackError), which only an explicit rollback retries, or its
// deadline has passed and its watchdog rolls it back.
// errors.Is(err, ErrNotConfirmable) is true.
type NotConfirmableError struct {
	ID            string
	Deadline      time.Time
	RollbackError string
}

func (e *NotConfirmableError) Error() string {
	if e.RollbackError != "" {
		return fmt.Sprintf("%v: rolling back try %s failed (%s), so the network may be half restored", ErrNotConfirmable, e.ID, e.RollbackError)
	}
	return fmt.Sprintf("%v: the deadline %s of try %s has passed and the watchdog rolls it back",
		ErrNotConfirmable, e.Deadline.Local().Format(time.RFC3339), e.ID)
}

// Is makes errors.Is(err, ErrNotConfirmable) true.
func (e *NotConfirmableError) Is(target error) bool { return target == ErrNotConfirmable }

// TryMargin is the time a try's deadline must leave beyond STP
// convergence: applying, verifying, and the gateway's answer.
const TryMargin = 5 * time.Second

// tryStopEarly ends apply and verify this long before the deadline, so
// that Try gives up before the watchdog rolls back under it.
const tryStopEarly = 500 * time.Millisecond

// Pending is the on-disk record of a try awaiting confirmation
// (<NetworkDir>/pending.json, 0600). The watchdog process reads it.
type Pending struct {
	ID          string    `json:"id"`
	Started     time.Time `json:"started"`
	Deadline    time.Time `json:"deadline"` // wall clock
	WatchdogPID int       `json:"watchdogPid,omitempty"`
	// WatchdogStart is the watchdog's start time (clock ticks after boot,
	// field 22 of /proc/PID/stat): a reused PID has another. 0: unknown.
	WatchdogStart uint64 `json:"watchdogStart,omitempty"`
	// BootID tells a record left by an earlier boot, whose watchdog is gone.
	BootID string `json:"bootId,omitempty"`
	// RollbackError is set when a rollback failed; the record stays so that
	// `virt net rollback` can try again.
	RollbackError string    `json:"rollbackError,omitempty"`
	Snapshot      *Snapshot `json:"snapshot"`
	// Applied is AppliedFile as it was before the try (nil: there was
	// none); a rollback puts it back, so the record of what virtcon
	// applied matches the restored links.
	Applied []byte `json:"applied,omitempty"`
	// Root is the layout root of the try (absolute): the rollback finds
	// the DHCP clients' files, /etc and the tried desired file under it.
	// Empty in a record of an older virtcon, whose rollback restores
	// links and AppliedFile only.
	Root string `json:"root,omitempty"`
	// DHCPClients are the interfaces whose management DHCP client ran
	// before the try: a rollback starts them again if the try stopped
	// them, and stops any client the try started.
	DHCPClients []string `json:"dhcpClients,omitempty"`
	// System is /etc/resolv.conf, /etc/hostname and the kernel's host
	// name before the try; a rollback puts them back.
	System *SystemSnapshot `json:"system,omitempty"`
	// DesiredSHA256 is the SHA-256 (hex) of the desired file this try
	// writes to DesiredPendingFile (ApplyDesired), so that a confirm
	// promotes this try's file and no other; empty for a try started
	// without one (Try).
	DesiredSHA256 string `json:"desiredSha256,omitempty"`
}

// restore puts the host back as it was before the try: the management
// DHCP clients, the links, DNS and the host name, and the applied-
// configuration record; then it drops the tried desired file, if any.
// recordPath is the pending record, which lives beside AppliedFile. It
// carries on past a failure (except a failed link restore, after which
// the record of what was applied is left alone) and returns every error.
func (p *Pending) restore(ctx context.Context, log *slog.Logger, recordPath string) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	layout, full := p.layout()
	if full {
		// First: a client the try started takes its address and default
		// route with it, before the snapshot's come back.
		errs = append(errs, p.stopTryDHCPClients(log, layout))
	}
	if err := p.Snapshot.Restore(ctx); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if p.System != nil {
		errs = append(errs, p.System.restore())
	}
	applied := filepath.Join(filepath.Dir(recordPath), "applied.yaml")
	if p.Applied == nil {
		if err := os.Remove(applied); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	} else {
		errs = append(errs, atomicfile.Write(applied, p.Applied, 0o600))
	}
	if full {
		errs = append(errs, p.startDHCPClients(ctx, log, layout))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if full {
		// The tried file must never become the desired one now.
		if err := os.Remove(DesiredPendingFile(layout)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// layout is the try's layout; false for a record without a root.
func (p *Pending) layout() (paths.Layout, bool) {
	if p.Root == "" {
		return paths.Layout{}, false
	}
	return paths.New(p.Root), true
}

// stopTryDHCPClients stops every DHCP client that runs now but did not
// before the try.
func (p *Pending) stopTryDHCPClients(log *slog.Logger, layout paths.Layout) error {
	running, err := dhcpRunningClients(layout)
	if err != nil {
		return err
	}
	var errs []error
	for _, iface := range running {
		if slices.Contains(p.DHCPClients, iface) {
			continue
		}
		if stopped, err := stopDHCPClient(layout, iface); err != nil {
			errs = append(errs, fmt.Errorf("stop the DHCP client the try started: %w", err))
		} else if stopped {
			log.Info("network try rollback: stopped the DHCP client the try started", "interface", iface)
		}
	}
	return errors.Join(errs...)
}

// startDHCPClients makes sure the DHCP clients that ran before the try
// run again, as Apply does: a client the try stopped released its lease,
// and the restored address would expire with nobody to renew it.
func (p *Pending) startDHCPClients(ctx context.Context, log *slog.Logger, layout paths.Layout) error {
	var errs []error
	for _, iface := range p.DHCPClients {
		if started, err := ensureDHCPClient(ctx, log, layout, iface); err != nil {
			errs = append(errs, fmt.Errorf("restart the DHCP client the try stopped: %w", err))
		} else if started {
			log.Info("network try rollback: started the DHCP client the try stopped", "interface", iface)
		}
	}
	return errors.Join(errs...)
}

// ownsDesired reports whether data is the desired file this try wrote.
func (p *Pending) ownsDesired(data []byte) bool {
	return p.DesiredSHA256 == "" || p.DesiredSHA256 == desiredSum(data)
}

func desiredSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Remaining is the time left before the rollback, never negative.
func (p *Pending) Remaining(now time.Time) time.Duration {
	return max(p.Deadline.Sub(now), 0)
}

// WatchdogRunning reports whether the record's watchdog process is alive
// (in this boot, started when recorded, not a zombie, with this try's ID
// in its environment). False also when that cannot be told.
func (p *Pending) WatchdogRunning() bool {
	live, _ := p.watchdogLiveness()
	return live == wdAlive
}

// PendingPath is the pending try record of layout.
func PendingPath(layout paths.Layout) string {
	return filepath.Join(layout.NetworkDir(), "pending.json")
}

// PendingTry returns the pending try, or ErrNoPendingTry.
func PendingTry(layout paths.Layout) (*Pending, error) {
	p, err := tryRead(PendingPath(layout))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoPendingTry
	}
	return p, err
}

// Confirm keeps the change of the pending try: it removes the record, and
// the watchdog stands down. A try whose deadline has passed, or whose
// rollback failed, is refused (ErrNotConfirmable): the watchdog is
// rolling it back, or the host is half restored.
func Confirm(ctx context.Context, layout paths.Layout) error { return confirm(ctx, layout, nil, nil) }

// confirm is Confirm with two hooks run under the lock: check may refuse
// the try before anything changes, kept runs once the record is gone.
func confirm(ctx context.Context, layout paths.Layout, check func(*Pending) error, kept func() error) error {
	path := PendingPath(layout)
	unlock, err := tryLockCtx(ctx, path)
	if err != nil {
		return fmt.Errorf("confirm: %w", err)
	}
	defer unlock()
	p, err := tryRead(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("confirm: %w (it may have been rolled back already)", ErrNoPendingTry)
	}
	if err != nil {
		return fmt.Errorf("confirm: %w", err)
	}
	if p.RollbackError != "" || !time.Now().Before(p.Deadline) {
		return fmt.Errorf("confirm: %w", &NotConfirmableError{ID: p.ID, Deadline: p.Deadline, RollbackError: p.RollbackError})
	}
	if check != nil {
		if err := check(p); err != nil {
			return fmt.Errorf("confirm: %w", err)
		}
	}
	if err := tryRemove(path); err != nil {
		return fmt.Errorf("confirm: %w", err)
	}
	wdWake(p)
	if kept != nil {
		if err := kept(); err != nil {
			return fmt.Errorf("confirm: kept, but %w", err)
		}
	}
	return nil
}

// Rollback restores the pending try's snapshot now and removes the record.
// When the restore fails the record stays, with the error, so that the
// watchdog tries again at the deadline and Rollback can be run again.
func Rollback(ctx context.Context, layout paths.Layout) error { return rollback(ctx, layout, nil) }

// rollback is Rollback with a hook run under the lock: check may refuse
// the try before anything changes.
func rollback(ctx context.Context, layout paths.Layout, check func(*Pending) error) error {
	path := PendingPath(layout)
	unlock, err := tryLockCtx(ctx, path)
	if err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	defer unlock()
	p, err := tryRead(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rollback: %w", ErrNoPendingTry)
	}
	if err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	if check != nil {
		if err := check(p); err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
	}
	if err := p.restore(context.WithoutCancel(ctx), nil, path); err != nil {
		p.RollbackError = err.Error()
		_ = tryWrite(path, p)
		return fmt.Errorf("rollback: %w", err)
	}
	if err := tryRemove(path); err != nil {
		return fmt.Errorf("rollback: restored, but %w", err)
	}
	wdWake(p)
	return nil
}

// MinTryDeadline is the shortest deadline a try of cfg (may be nil) over
// links may have: STPConvergence plus TryMargin.
func MinTryDeadline(cfg *Config, links []string) time.Duration {
	return STPConvergence(cfg, links) + TryMargin
}

// CheckTryDeadline refuses a deadline shorter than MinTryDeadline with a
// *DeadlineTooShortError, which says the minimum and what it is made of.
func CheckTryDeadline(cfg *Config, links []string, deadline time.Duration) error {
	least := MinTryDeadline(cfg, links)
	if deadline >= least {
		return nil
	}
	need := least.Round(time.Second)
	if need < least {
		need += time.Second
	}
	return &DeadlineTooShortError{Got: deadline, Min: need, STP: STPConvergence(cfg, links), Margin: TryMargin}
}

// Try applies a change that rolls itself back unless confirmed: it
// snapshots links, records the pending try, starts the watchdog process
// (which restores the snapshot at the deadline unless Confirm or Rollback
// removed the record first, even if this process is killed), then runs
// apply and verify, both bounded by the deadline. When either fails the
// snapshot is restored at once, the record removed and the watchdog
// stands down. On success it returns the pending try; the caller tells
// the operator its deadline and `virt net confirm`.
//
// verify may be nil. Try refuses a deadline under MinTryDeadline(nil, links) and a second try
// while one is pending (ErrTryPending). The caller should check the
// deadline against its configuration first (CheckTryDeadline) and give
// Verify a timeout that covers STPConvergence.
func Try(ctx context.Context, log *slog.Logger, layout paths.Layout, links []string,
	apply func(ctx context.Context) error, verify func(ctx context.Context) error,
	deadline time.Duration) (*Pending, error) {
	return tryRun(ctx, log, layout, links, apply, verify, deadline, nil)
}

// tryRun is Try; desired, when not nil, is the desired file the caller
// writes to DesiredPendingFile once the try stands (ApplyDesired): its
// checksum goes in the record, for ConfirmDesired.
func tryRun(ctx context.Context, log *slog.Logger, layout paths.Layout, links []string,
	apply func(ctx context.Context) error, verify func(ctx context.Context) error,
	deadline time.Duration, desired []byte) (*Pending, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := CheckTryDeadline(nil, links, deadline); err != nil {
		return nil, fmt.Errorf("try: %w", err)
	}
	path := PendingPath(layout)
	// The apply lock, from the snapshot to the end of the apply: a plain
	// Apply running meanwhile would put its half-done change into the
	// snapshot, or its change on top of the trial (which a rollback would
	// then not know about). Apply sees the try's own apply by its context.
	unlockApply, err := applyLock(ctx, layout)
	if err != nil {
		return nil, fmt.Errorf("try: %w", err)
	}
	p, err := tryStart(ctx, log, layout, path, links, deadline, desired)
	if err != nil {
		unlockApply()
		return nil, fmt.Errorf("try: %w", err)
	}
	log.Info("network try started", "id", p.ID, "deadline", p.Deadline.Format(time.RFC3339), "watchdog", p.WatchdogPID, "links", links)

	// Stop before the deadline: past it the watchdog restores under us.
	actx, cancel := context.WithDeadline(ctx, p.Deadline.Add(-tryStopEarly))
	err = apply(withTryApply(actx, p.ID))
	unlockApply()
	if err != nil {
		err = fmt.Errorf("apply: %w", err)
	} else if verify != nil {
		if err = verify(actx); err != nil {
			err = fmt.Errorf("verify: %w", err)
		}
	}
	cancel()
	if err == nil && time.Until(p.Deadline) < tryStopEarly {
		// Verified, but with no time left to confirm: as good as failed.
		err = &TryOverrunError{Deadline: p.Deadline}
	}
	if err != nil {
		return nil, fmt.Errorf("try: %w", tryAbandon(ctx, log, path, p, err))
	}
	cur, err := tryRead(path)
	if err != nil || cur.ID != p.ID {
		return nil, fmt.Errorf("try: the deadline %s passed before the change was verified; the watchdog rolled it back", p.Deadline.Format(time.RFC3339))
	}
	return cur, nil
}

// tryStart records the try and starts its watchdog, under the lock.
func tryStart(ctx context.Context, log *slog.Logger, layout paths.Layout, path string, links []string, deadline time.Duration, desired []byte) (*Pending, error) {
	unlock, err := tryLock(path)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkNoPendingTry(path); err != nil {
		return nil, err
	}
	// A tried desired file left by an earlier try must not pass for this
	// one's.
	if err := os.Remove(DesiredPendingFile(layout)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	root, err := filepath.Abs(layout.Root)
	if err != nil {
		return nil, err
	}
	layout = paths.New(root)
	snap, err := TakeSnapshot(ctx, links)
	if err != nil {
		return nil, err
	}
	applied, err := os.ReadFile(AppliedFile(layout))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	sys, err := takeSystemSnapshot(layout)
	if err != nil {
		return nil, err
	}
	clients, err := dhcpRunningClients(layout)
	if err != nil {
		return nil, err
	}
	id, err := tryNewID()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	p := &Pending{
		ID:          id,
		Started:     now.UTC(),
		Deadline:    now.Add(deadline).UTC(),
		BootID:      proc.BootID(),
		Snapshot:    snap,
		Applied:     applied,
		Root:        root,
		DHCPClients: clients,
		System:      sys,
	}
	if desired != nil {
		p.DesiredSHA256 = desiredSum(desired)
	}
	// The record exists before the watchdog, which reads it.
	if err := tryWrite(path, p); err != nil {
		return nil, err
	}
	pid, started, err := wdStart(log, layout, path, p.ID)
	if err != nil {
		_ = tryRemove(path)
		return nil, fmt.Errorf("start the watchdog: %w", err)
	}
	p.WatchdogPID, p.WatchdogStart = pid, started
	if err := tryWrite(path, p); err != nil {
		_ = tryRemove(path)
		wdWake(p)
		return nil, err
	}
	return p, nil
}

// tryAbandon restores the snapshot after a failed apply or verify. If the
// restore fails too, the record stays for the watchdog to retry at the
// deadline.
func tryAbandon(ctx context.Context, log *slog.Logger, path string, p *Pending, cause error) error {
	unlock, err := tryLock(path)
	if err != nil {
		return fmt.Errorf("%w; and %v: the watchdog restores the previous state at %s", cause, err, p.Deadline.Local().Format(time.RFC3339))
	}
	defer unlock()
	cur, err := tryRead(path)
	if err != nil || cur.ID != p.ID {
		return fmt.Errorf("%w; the watchdog has rolled back already", cause)
	}
	if rerr := p.restore(context.WithoutCancel(ctx), log, path); rerr != nil {
		log.Error("network try: restore after failure failed", "id", p.ID, "err", rerr)
		cur.RollbackError = rerr.Error()
		_ = tryWrite(path, cur)
		return fmt.Errorf("%w; restoring the previous state failed too (the watchdog tries again at %s): %v",
			cause, p.Deadline.Local().Format(time.RFC3339), rerr)
	}
	if err := tryRemove(path); err != nil {
		return fmt.Errorf("%w; the previous state is restored, but %v", cause, err)
	}
	wdWake(cur)
	log.Info("network try failed; previous state restored", "id", p.ID, "err", cause)
	return fmt.Errorf("%w; the previous state is restored", cause)
}

func tryRead(path string) (*Pending, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read pending try: %w", err)
	}
	var p Pending
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("read pending try %s: %w", path, err)
	}
	if p.ID == "" || p.Snapshot == nil {
		return nil, fmt.Errorf("read pending try %s: no id or snapshot", path)
	}
	return &p, nil
}

func tryWrite(path string, p *Pending) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("write pending try: %w", err)
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}

func tryRemove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pending try: %w", err)
	}
	return nil
}

// tryLock serialises Try, Confirm, Rollback and the watchdog's rollback
// with an flock beside the record; it is released when the file closes,
// so also when its holder dies. It waits as long as the holder takes;
// tryLockCtx gives up when its context ends.
func tryLock(recordPath string) (unlock func(), err error) {
	return tryLockCtx(context.Background(), recordPath)
}

// tryLockCtx is tryLock polled until ctx ends (internal/flock.Acquire):
// then it fails with ErrTryBusy, since another virtcon process is at the
// try (confirming, rolling back, or hung doing so).
func tryLockCtx(ctx context.Context, recordPath string) (unlock func(), err error) {
	l, err := flock.Acquire(ctx, filepath.Join(filepath.Dir(recordPath), "pending.lock"))
	switch {
	case errors.Is(err, flock.ErrLocked):
		return nil, fmt.Errorf("lock pending try: %w: %w", ErrTryBusy, err)
	case err != nil:
		return nil, fmt.Errorf("lock pending try: %w", err)
	}
	return func() { _ = l.Release() }, nil
}

func tryNewID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("try id: %w", err)
	}
	return hex.EncodeToString(b), nil
}
