package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// What became of a VM in a shutdown (ShutdownOutcome.Outcome).
const (
	// ShutdownPoweredOff: the guest powered off after the ACPI power
	// button, in time.
	ShutdownPoweredOff = "powered-off"
	// ShutdownQuit: QEMU was told to quit (the guest was still up at the
	// deadline, or onShutdown is kill).
	ShutdownQuit = "quit"
	// ShutdownKilled: QEMU answered neither and was killed (SIGKILL).
	ShutdownKilled = "killed"
	// ShutdownSaved: the guest's state was saved; the next start resumes it.
	ShutdownSaved = "saved"
	// ShutdownGone: it no longer ran when its turn came.
	ShutdownGone = "gone"
	// ShutdownFailed: it could not be stopped (Error says why): its QEMU
	// may still run, and dies with the host.
	ShutdownFailed = "failed"
	// ShutdownSkipped: ours and running, but its spec cannot be read, so
	// nothing acts on it (it dies with the host).
	ShutdownSkipped = "skipped"
)

// ErrInvalidShutdown is a shutdown asked with options that make no sense.
var ErrInvalidShutdown = fielderr.NewKind("invalid shutdown options")

// ShutdownOptions tune ShutdownGuests; zero values take the host policy's.
type ShutdownOptions struct {
	// OnShutdown: shutdown, save or kill (OnShutdown*).
	OnShutdown string
	// Timeout is the one deadline of the whole shutdown: every guest has
	// until then to power off (or be saved), those that start later in the
	// queue get what is left, and QEMU is told to quit for those still up.
	Timeout time.Duration
	// Parallel is how many guests go down at once.
	Parallel int
	// Progress, when set, hears of each VM as its turn begins (Outcome "")
	// and as it ends, one call at a time, from the goroutines doing the work.
	Progress func(ShutdownProgress)
}

// ShutdownProgress is one step of a shutdown, for a face to show.
type ShutdownProgress struct {
	VM ShutdownOutcome
	// Done of Total VMs have an outcome.
	Done, Total int
	// Deadline is when the remaining guests are quit.
	Deadline time.Time
}

// ShutdownOutcome is what became of one VM.
type ShutdownOutcome struct {
	Name    string            `json:"name"`
	UID     string            `json:"uid"`
	Outcome string            `json:"outcome"`
	Took    duration.Duration `json:"took"`
	// SavedBytes is the size of the saved state (saved).
	SavedBytes int64 `json:"savedBytes,omitempty"`
	// Note says what went differently: a save that failed before the
	// guest was powered off instead.
	Note  string `json:"note,omitempty"`
	Error string `json:"error,omitempty"`
}

// ShutdownReport is shutdown.json as ShutdownGuests leaves it: the record
// written before anything was stopped (which VMs ran), completed with
// each one's outcome. LoadShutdownRecord reads its record part.
type ShutdownReport struct {
	ShutdownRecord
	Timeout  duration.Duration `json:"timeout"`
	Parallel int               `json:"parallel"`
	// PolicyError: host.yaml did not load and the defaults were used (a
	// broken policy must not leave guests to die hard).
	PolicyError string `json:"policyError,omitempty"`
	// ListError: some VMs could not be read (those are Skipped or left out).
	ListError string `json:"listError,omitempty"`
	// RecordKept: nothing ran, and the record of an earlier shutdown in
	// this boot, which found VMs running, was kept (shutdown.json is not
	// this report): `virt host reboot` shuts the guests down, then
	// systemd's stop of virtcon-guests.service runs shutdown-guests again,
	// and that second run must not forget what the first found. A second
	// run that finds VMs running (one the first could not stop, one
	// skipped, one started since) writes its record with the first's
	// Running merged in (mergeRunning).
	RecordKept bool `json:"recordKept,omitempty"`
	// LockError: the host's shutdown lock could not be had by the
	// deadline (another shutdown-guests held it, or it could not be
	// opened), and this one went on without it.
	LockError string `json:"lockError,omitempty"`
	// Finished is when it ended; nil in a record of a shutdown cut short.
	Finished *time.Time        `json:"finished,omitempty"`
	Took     duration.Duration `json:"took"`
	Outcomes []ShutdownOutcome `json:"outcomes"`
}

// Count returns how many outcomes are outcome.
func (r *ShutdownReport) Count(outcome string) int {
	n := 0
	for _, o := range r.Outcomes {
		if o.Outcome == outcome {
			n++
		}
	}
	return n
}

// guests is what a shutdown needs of the VM manager.
type guests interface {
	List(ctx context.Context) ([]vm.Entry, error)
	PowerOff(ctx context.Context, ref string, opts vm.StopOptions) (vm.StopResult, error)
	Save(ctx context.Context, ref string) (*vm.SaveResult, error)
}

// ShutdownGuests takes the running VMs down as the host policy says
// (onShutdown, shutdownTimeout, parallelShutdown; opts override): it
// records which VMs run (shutdown.json, for onBoot: restore) before it
// stops anything, then powers them off by ACPI at most Parallel at once,
// with one shared deadline after which those still up are quit (shutdown),
// saves them (save, by the deadline less saveFallback; a guest whose save
// fails or runs past that is powered off by ACPI in what is left, then
// quit), or
// quits them at once (kill). The record is completed with each VM's
// outcome. Guests that are not ours are never touched.
//
// A host.yaml that does not load is no reason to leave the guests to die
// hard: the defaults are used and the report says why. The error is for
// bad options, a VM store that cannot be listed, or a record that could
// not be written (the guests were taken down all the same).
func (h *Host) ShutdownGuests(ctx context.Context, opts ShutdownOptions) (*ShutdownReport, error) {
	p, perr := LoadPolicy(h.Layout)
	if perr != nil {
		h.Log.Warn("host policy not loaded; shutting guests down with the defaults", "err", perr)
		p = DefaultPolicy()
	}
	s := shutdown{g: h.VMs, log: h.Log,
		write: func(r *ShutdownReport) error { return writeRecord(ShutdownRecordFile(h.Layout), r) },
		load:  func() (*ShutdownRecord, error) { return LoadShutdownRecord(h.Layout) },
		lock:  func(ctx context.Context) (func(), error) { return lockShutdown(ctx, h.Layout) },
		mark:  func(at time.Time) error { return markShuttingDown(h.Layout, at) },
	}
	rep, err := s.run(ctx, p, opts)
	if rep != nil && perr != nil {
		rep.PolicyError = perr.Error()
	}
	return rep, err
}

// shutdownLockFile serialises shutdowns: `virt host reboot` and
// systemd's stop of virtcon-guests.service (or two faces) may run one each
// at the same time, and two that interleave would stop the same guests
// twice and write each other's record over.
func shutdownLockFile(layout paths.Layout) string {
	return filepath.Join(layout.RunDir(), "locks", "host-shutdown.lock")
}

// lockShutdown takes the host's shutdown lock, waiting until ctx ends.
func lockShutdown(ctx context.Context, layout paths.Layout) (func(), error) {
	l, err := flock.Acquire(ctx, shutdownLockFile(layout))
	if err != nil {
		return nil, err
	}
	return func() { l.Release() }, nil
}

// shutdown is one ShutdownGuests, its parts replaceable by tests.
type shutdown struct {
	g     guests
	log   *slog.Logger
	write func(*ShutdownReport) error
	load  func() (*ShutdownRecord, error)
	// lock takes the host's shutdown lock until ctx ends; nil: none.
	lock func(ctx context.Context) (release func(), err error)
	// mark sets the "shutting down" marker (ShuttingDownFile); nil: none.
	mark func(at time.Time) error
	now  func() time.Time
	// grace is shutdownGrace; tests make it short.
	grace time.Duration

	release func()
}

func (s *shutdown) run(ctx context.Context, p *Policy, opts ShutdownOptions) (*ShutdownReport, error) {
	if s.now == nil {
		s.now = time.Now
	}
	mode, timeout, parallel := cmp.Or(opts.OnShutdown, p.OnShutdown), cmp.Or(opts.Timeout, p.Timeout()), cmp.Or(opts.Parallel, p.ParallelShutdown)
	var bad []*fielderr.FieldError
	switch mode {
	case OnShutdownShutdown, OnShutdownSave, OnShutdownKill:
	default:
		bad = append(bad, &fielderr.FieldError{Field: "onShutdown", Value: mode, Msg: "must be shutdown, save or kill"})
	}
	if opts.Timeout < 0 {
		bad = append(bad, &fielderr.FieldError{Field: "timeout", Value: opts.Timeout.String(), Msg: "must not be negative"})
	}
	if opts.Parallel < 0 || opts.Parallel > 256 {
		bad = append(bad, &fielderr.FieldError{Field: "parallel", Value: opts.Parallel, Msg: "must be between 1 and 256"})
	}
	if len(bad) > 0 {
		return nil, fielderr.New(ErrInvalidShutdown, bad...)
	}

	start := s.now()
	deadline := start.Add(timeout)
	// first of all: a `virt host boot` under way starts no more VMs
	if s.mark != nil {
		if err := s.mark(start); err != nil {
			s.log.Warn("the host's shutting-down marker not set; a boot under way may start VMs meanwhile", "err", err)
		}
	}
	// saves end early enough for a guest not saved to power off by ACPI
	saveBy := deadline.Add(-saveFallback(timeout))
	// one shutdown at a time: a second waits for the first (by its own
	// deadline), then finds what the first left running
	lockErr := s.takeLock(ctx, deadline)
	defer s.unlock()
	entries, listErr := s.g.List(ctx)
	if listErr != nil && len(entries) == 0 {
		return nil, fmt.Errorf("shutdown guests: list the VMs: %w", listErr)
	}
	rep := &ShutdownReport{
		ShutdownRecord: ShutdownRecord{Time: start.UTC(), BootID: proc.BootID(), OnShutdown: mode, Running: []string{}},
		Timeout:        duration.Duration(timeout), Parallel: parallel, Outcomes: []ShutdownOutcome{},
	}
	if listErr != nil {
		rep.ListError = listErr.Error()
	}
	if lockErr != nil {
		rep.LockError = lockErr.Error()
	}
	var queue []vm.Entry
	for _, e := range entries {
		switch {
		case e.Class == vm.ClassManaged && e.PID > 0:
			queue = append(queue, e)
			rep.Running = append(rep.Running, e.UID)
		case e.Class == vm.ClassUnreadable && e.PID > 0:
			rep.Outcomes = append(rep.Outcomes, ShutdownOutcome{Name: e.Name, UID: e.UID, Outcome: ShutdownSkipped,
				Error: "its spec cannot be read, so virtcon does not act on it: " + e.Message})
		}
	}
	// down in the reverse of the boot's order: highest order first, ties
	// as the boot breaks them
	slices.SortStableFunc(queue, func(a, b vm.Entry) int {
		return compareStartup(startupKey{-a.StartupOrder, a.Name, a.UID}, startupKey{-b.StartupOrder, b.Name, b.UID})
	})
	// the record first: a host that loses power from here on still knows
	// what ran
	var errs []error
	s.mergePrevious(rep, entries, len(queue) == 0 && len(rep.Outcomes) == 0)
	write := func() {
		if rep.RecordKept {
			return
		}
		if err := s.write(rep); err != nil {
			s.log.Warn("shutdown record not written; shutting guests down all the same", "err", err)
			errs = append(errs, fmt.Errorf("shutdown guests: record: %w", err))
		}
	}
	write()

	var (
		mu   sync.Mutex
		done = len(rep.Outcomes)
	)
	total := done + len(queue)
	report := func(o ShutdownOutcome, finished bool) {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			rep.Outcomes = append(rep.Outcomes, o)
			done++
		}
		if opts.Progress != nil {
			opts.Progress(ShutdownProgress{VM: o, Done: done, Total: total, Deadline: deadline})
		}
	}
	// by order group, highest first: a group is down (or its guests'
	// turns have ended) before the next begins, as the boot started the
	// next only after it; in parallel within a group, under the one
	// deadline
	sem := make(chan struct{}, max(parallel, 1))
	for group := range orderGroups(queue) {
		var wg sync.WaitGroup
		for _, e := range group {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				report(ShutdownOutcome{Name: e.Name, UID: e.UID}, false)
				report(s.one(ctx, e, mode, deadline, saveBy), true)
			}()
		}
		wg.Wait()
	}

	end := s.now()
	rep.Finished, rep.Took = &end, duration.Duration(end.Sub(start))
	// the queue's order, not the order they finished in
	order := map[string]int{}
	for i, e := range queue {
		order[e.UID] = i + 1
	}
	slices.SortStableFunc(rep.Outcomes, func(a, b ShutdownOutcome) int { return cmp.Compare(order[a.UID], order[b.UID]) })
	write()
	return rep, errors.Join(errs...)
}

// orderGroups yields the runs of queue (sorted) that share a
// spec.startup.order.
func orderGroups(queue []vm.Entry) iter.Seq[[]vm.Entry] {
	return func(yield func([]vm.Entry) bool) {
		for i := 0; i < len(queue); {
			j := i + 1
			for j < len(queue) && queue[j].StartupOrder == queue[i].StartupOrder {
				j++
			}
			if !yield(queue[i:j]) {
				return
			}
			i = j
		}
	}
}

// takeLock takes the host's shutdown lock, waiting for another shutdown
// until deadline at most; an error says why it went on without it.
func (s *shutdown) takeLock(ctx context.Context, deadline time.Time) error {
	s.release = nil
	if s.lock == nil {
		return nil
	}
	// a first try without waiting, so the wait is logged only when there is one
	now, cancel := context.WithCancel(ctx)
	cancel()
	release, err := s.lock(now)
	if errors.Is(err, flock.ErrLocked) {
		s.log.Warn("another shutdown-guests is under way; waiting for it", "until", deadline.Format(time.TimeOnly))
		dctx, cancel := context.WithDeadline(ctx, deadline)
		release, err = s.lock(dctx)
		cancel()
	}
	if err != nil {
		s.log.Warn("shutdown-guests goes on without the host's shutdown lock", "err", err)
		return fmt.Errorf("the host's shutdown lock was not had by the deadline, so this shutdown went on without it: %w", err)
	}
	s.release = release
	return nil
}

func (s *shutdown) unlock() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// mergePrevious folds an earlier shutdown record of this boot into rep: a
// second shutdown in one boot (`virt host reboot`, then systemd's stop of
// virtcon-guests.service) must not forget the VMs the first took down.
// When nothing runs now and nothing of the first is dropped, the first's
// record is kept as it is (rep.RecordKept); otherwise rep's Running
// becomes the first's, less those started since and not running now (the
// operator started and stopped them after it), plus those running now,
// and a save by either is the record's onShutdown.
func (s *shutdown) mergePrevious(rep *ShutdownReport, entries []vm.Entry, nothingNow bool) {
	if s.load == nil {
		return
	}
	prev, err := s.load()
	if err != nil {
		s.log.Warn("the previous shutdown record cannot be read; this one replaces it", "err", err)
		return
	}
	if prev == nil || prev.BootID == "" || prev.BootID != rep.BootID {
		return
	}
	merged, dropped := mergeRunning(prev, rep.Running, entries)
	if nothingNow && dropped == 0 && len(merged) > 0 {
		rep.RecordKept = true
		return
	}
	rep.Running = merged
	if prev.OnShutdown == OnShutdownSave {
		rep.OnShutdown = OnShutdownSave
	}
}

// mergeRunning is prev's Running, less those started since prev.Time that
// do not run now, then running's that prev lacks; dropped counts those
// left out.
func mergeRunning(prev *ShutdownRecord, running []string, entries []vm.Entry) (merged []string, dropped int) {
	now := map[string]bool{}
	for _, uid := range running {
		now[strings.ToLower(uid)] = true
	}
	started := map[string]time.Time{}
	for _, e := range entries {
		started[strings.ToLower(e.UID)] = e.StartedAt
	}
	seen := map[string]bool{}
	merged = []string{}
	for _, uid := range prev.Running {
		u := strings.ToLower(uid)
		if seen[u] {
			continue
		}
		if !now[u] && started[u].After(prev.Time) {
			dropped++
			continue
		}
		seen[u] = true
		merged = append(merged, uid)
	}
	for _, uid := range running {
		if u := strings.ToLower(uid); !seen[u] {
			seen[u] = true
			merged = append(merged, uid)
		}
	}
	return merged, dropped
}

// saveFallback is the part of a save shutdown's timeout kept for the
// guests that were not saved: they are powered off by ACPI in it, as with
// onShutdown: shutdown, then quit at the deadline.
func saveFallback(timeout time.Duration) time.Duration {
	return min(30*time.Second, timeout/3)
}

// one takes one VM down by mode, by the shared deadline; a save must end
// by saveBy.
func (s *shutdown) one(ctx context.Context, e vm.Entry, mode string, deadline, saveBy time.Time) (o ShutdownOutcome) {
	start := s.now()
	o = ShutdownOutcome{Name: e.Name, UID: e.UID}
	defer func() { o.Took = duration.Duration(s.now().Sub(start)) }()
	if mode == OnShutdownSave && !s.now().Before(saveBy) {
		o.Note = "its turn came too late to save it before the deadline: powered off instead"
		s.log.Warn("no time left to save; powering the guest off instead", "vm", e.Name)
	} else if mode == OnShutdownSave {
		sctx, cancel := context.WithDeadline(ctx, saveBy)
		r, err := s.g.Save(sctx, e.UID)
		cancel()
		switch {
		case err == nil:
			o.Outcome, o.SavedBytes = ShutdownSaved, r.Bytes
			return o
		case errors.Is(err, vm.ErrNotRunning):
			o.Outcome = ShutdownGone
			return o
		}
		// the guest runs on after a failed save: power it off instead,
		// by ACPI in what is left, then quit
		o.Note = "save failed, powered off instead: " + err.Error()
		s.log.Warn("save failed; powering the guest off instead", "vm", e.Name, "err", err)
	}
	// the power button, and QEMU ended at the deadline; at once in
	// kill mode or when no time is left
	stop := vm.StopOptions{Timeout: deadline.Sub(s.now()), Force: true}
	if mode == OnShutdownKill || stop.Timeout <= 0 {
		stop = vm.StopOptions{Now: true}
	}
	res, err := s.powerOff(ctx, e, stop, deadline)
	if err != nil {
		o.Outcome, o.Error = ShutdownFailed, err.Error()
		return o
	}
	o.Outcome = map[string]string{
		vm.StoppedACPI: ShutdownPoweredOff, vm.StoppedQuit: ShutdownQuit,
		vm.StoppedKilled: ShutdownKilled, vm.StoppedNotRunning: ShutdownGone,
	}[res.How]
	if o.Outcome == "" {
		o.Outcome = ShutdownQuit
	}
	return o
}

// shutdownGrace is how long past the shutdown's deadline one VM's
// power-off may run: enough for QEMU's quit and, failing that, its kill.
// Without a bound a VM whose lock another virtcon process holds (a `virt
// vm stop --timeout 1h`, a long `virt vm save`) would hold the host's
// power-off back for as long.
const shutdownGrace = 15 * time.Second

// powerOff is the manager's PowerOff of e, bounded by deadline plus the
// grace. A graceful stop that the bound interrupts (its lock was had
// late, and the power button's wait ran past it) is followed by a forced
// one, as the deadline says; one whose lock was never had is an error
// saying so.
func (s *shutdown) powerOff(ctx context.Context, e vm.Entry, stop vm.StopOptions, deadline time.Time) (vm.StopResult, error) {
	grace := cmp.Or(s.grace, shutdownGrace)
	pctx, cancel := context.WithDeadline(ctx, deadline.Add(grace))
	res, err := s.g.PowerOff(pctx, e.UID, stop)
	cancel()
	var interrupted *vm.StopInterruptedError
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, flock.ErrLocked):
		return res, fmt.Errorf("vm %q: not stopped: its lock was held by another virtcon process (a vm stop or save of it?) past the shutdown's deadline and %s of grace: %w", e.Name, grace, err)
	case errors.As(err, &interrupted) && ctx.Err() == nil:
		s.log.Warn("the power-off ran past the shutdown's deadline; quitting", "vm", e.Name, "err", err)
		fctx, cancel := context.WithTimeout(ctx, grace)
		defer cancel()
		res, ferr := s.g.PowerOff(fctx, e.UID, vm.StopOptions{Now: true})
		if ferr != nil {
			return res, fmt.Errorf("vm %q: not stopped by the shutdown's deadline and %s of grace (%v), nor quit then: %w", e.Name, grace, err, ferr)
		}
		return res, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return res, fmt.Errorf("vm %q: not stopped by the shutdown's deadline and %s of grace: %w", e.Name, grace, err)
	}
	return res, err
}

// ShutdownPlan words what the policy does to the running VMs when the host
// goes down, for the faces' warnings before a reboot or power-off
// (power.Warning): "shut down first (…)".
func (p *Policy) ShutdownPlan() string {
	switch p.OnShutdown {
	case OnShutdownSave:
		t := p.Timeout()
		return fmt.Sprintf("saved first (RAM and device state to disk; a start resumes each where it was; one not saved within %s is powered off by ACPI, and quit if still up after %s)", t-saveFallback(t), t)
	case OnShutdownKill:
		return "quit first, without asking the guests (host.yaml: onShutdown: kill)"
	}
	return fmt.Sprintf("shut down first (the ACPI power button, %d at once; those still up after %s are quit)", p.ParallelShutdown, p.Timeout())
}
