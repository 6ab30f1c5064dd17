package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/vm"
)

// BootOptions tune Boot.
type BootOptions struct {
	// Sleep waits d, or until ctx ends (its error then); nil is a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// bootStartTimeout bounds one VM's start at boot: a QEMU that hangs
// before its QMP answers must not hold back the VMs after it.
const bootStartTimeout = 2 * time.Minute

// The boot's view of the VM and network services (*vm.Manager and
// *netcfg.Service), faked by its tests.
type (
	bootVMs interface {
		List(ctx context.Context) ([]vm.Entry, error)
		// Peek reads one VM again (by UID) from its spec and /proc.
		Peek(ctx context.Context, ref string) (*vm.Entry, error)
		Start(ctx context.Context, ref string) error
		MarkStopped(ctx context.Context, ref string) (bool, error)
	}
	bootNet interface {
		ResolveExpiredTry(ctx context.Context) (*netcfg.ResolvedTry, error)
		PendingTry() (*netcfg.Pending, error)
		Reapply(ctx context.Context) (*netcfg.Result, error)
	}
)

// BootError is a boot that did not do all it was to do. The boot went on
// past each failure: the record says what was done.
type BootError struct {
	// Policy: host.yaml did not load; no VM was started (the network was
	// brought up all the same).
	Policy error
	// Network: the host network could not be brought up.
	Network error
	// List: the VMs could not be listed; none was started.
	List error
	// VMs are the starts that failed, each naming its VM.
	VMs []error
	// Canceled: the boot was cancelled before every VM had its turn.
	Canceled error
	// Record: the boot record could not be written.
	Record error
}

func (e *BootError) Error() string {
	var parts []string
	if e.Policy != nil {
		parts = append(parts, fmt.Sprintf("%v: no VM started", e.Policy))
	}
	if e.Network != nil {
		parts = append(parts, fmt.Sprintf("network: %v", e.Network))
	}
	if e.List != nil {
		parts = append(parts, fmt.Sprintf("no VM started: %v", e.List))
	}
	if n := len(e.VMs); n > 0 {
		msgs := make([]string, n)
		for i, err := range e.VMs {
			msgs[i] = err.Error()
		}
		parts = append(parts, fmt.Sprintf("%d VM start(s) failed: %s", n, strings.Join(msgs, "; ")))
	}
	if e.Canceled != nil {
		parts = append(parts, fmt.Sprintf("cancelled before every VM was started: %v", e.Canceled))
	}
	if e.Record != nil {
		parts = append(parts, fmt.Sprintf("boot record: %v", e.Record))
	}
	return "host boot: " + strings.Join(parts, "; ")
}

// Unwrap gives every cause (errors.Is and As see each: a refused policy
// is a fielderr.ErrInvalid).
func (e *BootError) Unwrap() []error {
	errs := append([]error{e.Policy, e.Network, e.List}, e.VMs...)
	errs = append(errs, e.Canceled, e.Record)
	return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}

func (e *BootError) empty() bool { return len(e.Unwrap()) == 0 }

// Boot brings the host up to what it ran before it went down, once at
// boot (virtcon-guests.service's start) and safely again at any time:
//
//  1. A network try that the reboot interrupted (its watchdog gone with
//     the boot) is rolled back, as every face does on sight
//     (netcfg.ResolveExpiredTry).
//  2. The applied network configuration is applied again
//     (netcfg.Service.Reapply): bridges, VLANs, NAT networks with their
//     nftables rules and dnsmasq, the management DHCP client. A try made
//     in this boot and still on trial is left to its watchdog.
//  3. The VMs are started, with the same call `virt vm start` makes
//     (vm.Manager.Start), one after another: those with spec.autostart,
//     with onBoot: restore those the last clean shutdown found running
//     (ShutdownRecord, unless a VM started after it: then it is stale),
//     and the Saved VMs (resumed), by spec.startup.order and then name, each
//     after its spec.startup.delay and, from the second start on, the
//     policy's startDelay. Each VM is read again right before its start,
//     and one that no longer qualifies (deleted, autostart turned off,
//     started and stopped by hand meanwhile) is not started. A VM that
//     runs already is left alone; one that fails is recorded and the
//     rest go on. In the first run of a boot,
//     a VM whose spec says running but whose QEMU the reboot took, and
//     that is not started, is marked stopped (vm.Manager.MarkStopped).
//  4. What it did is written to boot.json and logged.
//
// Starts are sequential, not parallel: a start is short (QEMU is set up
// and its QMP answers in well under a second; the guest boots on its
// own afterwards), orders and delays are what the operator asked for, and
// on a host with few cores parallel QEMU setups gain little and make the
// start timestamps say less.
//
// A host.yaml that does not admit is refused with its field and value:
// the network is still brought up (a broken policy must not leave the
// host without its management network), but no VM is started, since
// nothing says which. Boot then returns a *BootError, as it does for a
// network that failed or a VM that did not start; the record is written
// in every case but when the boot lock cannot be taken. Two boots at
// once take turns.
func (h *Host) Boot(ctx context.Context, opts BootOptions) (*BootRecord, error) {
	return h.boot(ctx, opts, h.VMs, h.Net)
}

func (h *Host) boot(ctx context.Context, opts BootOptions, vms bootVMs, nw bootNet) (*BootRecord, error) {
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	lock, err := flock.Acquire(ctx, filepath.Join(h.Layout.RunDir(), "locks", "host-boot.lock"))
	if err != nil {
		return nil, fmt.Errorf("host boot: %w", err)
	}
	defer lock.Release()

	rec := &BootRecord{Time: time.Now().UTC(), BootID: proc.BootID(), VMs: []BootVM{}}
	prev, err := LoadBootRecord(h.Layout)
	if err != nil {
		// fail closed: whether this boot ran before, and which shutdown
		// record a boot acted on, are unknown; a rerun must neither
		// restore the VMs again nor mark stopped the ones that crashed
		rec.PreviousError = err.Error()
		h.Log.Error("host boot: the previous boot record cannot be read: this run counts as a later one of this boot, acts on no shutdown record and marks no VM stopped", "err", err)
	}
	rec.FirstOfBoot = err == nil && (prev == nil || rec.BootID == "" || prev.BootID != rec.BootID)
	if prev != nil {
		rec.ShutdownActedOn = prev.ShutdownActedOn
	}
	be := &BootError{}
	policy, perr := LoadPolicy(h.Layout)
	if perr != nil {
		be.Policy = perr
		rec.PolicyError = perr.Error()
		rec.VMsError = "no VM started: the host policy did not load"
		h.Log.Error("host boot: host policy refused: bringing the network up, starting no VM", "err", perr)
	}
	rec.Policy = policy

	be.Network = h.bootNetwork(ctx, nw, &rec.Network)
	if perr == nil {
		h.bootVMs(ctx, opts, vms, policy, rec, be)
	}
	rec.Finished = time.Now().UTC()
	if err := writeBootRecord(h.Layout, rec); err != nil {
		be.Record = err
	}
	h.logBoot(rec)
	if be.empty() {
		return rec, nil
	}
	return rec, be
}

// bootNetwork resolves an interrupted try and applies the network as
// applied, into n.
func (h *Host) bootNetwork(ctx context.Context, nw bootNet, n *BootNetwork) error {
	start := time.Now()
	defer func() { n.Took = duration.Duration(time.Since(start).Round(time.Millisecond)) }()
	n.Steps = []string{}
	fail := func(err error) error {
		n.Result, n.Error = NetFailed, err.Error()
		h.Log.Error("host boot: network", "err", err)
		return err
	}
	resolved, err := nw.ResolveExpiredTry(ctx)
	n.RolledBack = resolved
	if err != nil {
		return fail(err)
	}
	if resolved != nil {
		h.Log.Warn("host boot: rolled back the network try the host went down with", "id", resolved.ID, "why", resolved.Why)
	}
	p, err := nw.PendingTry()
	if err != nil {
		return fail(err)
	}
	if p != nil {
		// made in this boot, its watchdog alive (else it was resolved
		// above): it rolls back or is confirmed on its own
		n.Result = NetOnTrial
		n.Note = fmt.Sprintf("try %s is on trial until %s: the network is left to it", p.ID, p.Deadline.Local().Format(time.RFC3339))
		return nil
	}
	res, err := nw.Reapply(ctx)
	switch {
	case err != nil:
		return fail(err)
	case res == nil:
		n.Result = NetNone
	case res.Changed:
		n.Result, n.Steps = NetApplied, res.Steps
	default:
		n.Result = NetUnchanged
	}
	return nil
}

// bootVMs starts the VMs the policy names, in order, into rec; failures
// go to be.
func (h *Host) bootVMs(ctx context.Context, opts BootOptions, vms bootVMs, policy *Policy, rec *BootRecord, be *BootError) {
	entries, err := vms.List(ctx)
	if entries == nil && err != nil {
		// fail closed: nothing can be told about any VM
		be.List = err
		rec.VMsError = "the VMs cannot be listed: " + err.Error()
		return
	}
	for _, e := range entries {
		if e.Class == vm.ClassUnreadable {
			rec.Skipped = append(rec.Skipped, BootSkipped{UID: e.UID, Why: e.Message})
		}
	}
	restore, keepMissing := h.bootShutdownRecord(policy, rec, entries)
	plan := planBoot(entries, restore)
	byUID := map[string]vm.Entry{}
	for _, e := range entries {
		byUID[e.UID] = e
	}
	// a shutdown that begins meanwhile (virt host reboot, systemctl
	// reboot) ends the starts: checked before each start, and watched
	// during each delay
	watch, stopWatch := h.watchShutdown(ctx)
	defer stopWatch()
	var down error
	notStarted := func(v *BootVM, err error) {
		v.Outcome, v.Note = BootNotStarted, err.Error()
		if be.Canceled == nil {
			be.Canceled = err
		}
	}
	attempts := 0
	for i := range plan {
		v := &plan[i]
		if byUID[v.UID].Running() {
			v.Outcome = BootAlreadyRunning
			continue
		}
		if down == nil {
			down = shuttingDown(h.Layout)
		}
		if down != nil {
			notStarted(v, down)
			continue
		}
		wait := v.Delay.D()
		if attempts > 0 {
			wait += policy.Delay()
		}
		if err := opts.Sleep(watch, wait); err != nil {
			if cause := context.Cause(watch); errors.Is(cause, ErrHostShuttingDown) && ctx.Err() == nil {
				down = cause
				h.Log.Warn("host boot: the host is shutting down: starting no more VMs", "why", cause)
				notStarted(v, down)
				continue
			}
			v.Outcome, v.Note = BootNotStarted, "the boot was cancelled before its turn: "+err.Error()
			if be.Canceled == nil {
				be.Canceled = err
			}
			continue
		}
		if down = shuttingDown(h.Layout); down != nil {
			h.Log.Warn("host boot: the host is shutting down: starting no more VMs", "why", down)
			notStarted(v, down)
			continue
		}
		// the plan was made when the boot began: what was done to the VM
		// since (its autostart turned off, deleted, started and stopped
		// by hand) wins
		if outcome, note := recheck(ctx, vms, v, restore, rec.Time); outcome != "" {
			v.Outcome, v.Note = outcome, note
			h.Log.Info("host boot: vm not started", "vm", v.Name, "why", note)
			continue
		}
		attempts++
		at := time.Now().UTC()
		v.StartedAt = &at
		sctx, cancel := context.WithTimeout(ctx, bootStartTimeout)
		err := vms.Start(sctx, v.UID)
		cancel()
		v.Took = duration.Duration(time.Since(at).Round(time.Millisecond))
		if err != nil {
			v.Outcome, v.Error = BootFailed, err.Error()
			be.VMs = append(be.VMs, err)
			h.Log.Error("host boot: vm did not start", "vm", v.Name, "why", v.Why, "err", err)
			continue
		}
		v.Outcome = BootStarted
		h.Log.Info("host boot: vm started", "vm", v.Name, "why", v.Why, "order", v.Order, "took", v.Took)
	}
	rec.VMs = append(rec.VMs, plan...)
	if rec.FirstOfBoot && !keepMissing {
		rec.VMs = append(rec.VMs, h.markStopped(ctx, vms, entries, plan)...)
	}
}

// shutdownPoll is how often a boot looks for the "shutting down" marker
// during a delay.
const shutdownPoll = 200 * time.Millisecond

// watchShutdown returns ctx, cancelled (its cause wrapping
// ErrHostShuttingDown) once a shutdown of this boot sets its marker; stop
// ends the watch.
func (h *Host) watchShutdown(ctx context.Context) (watched context.Context, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(shutdownPoll)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				if err := shuttingDown(h.Layout); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	return wctx, func() { cancel(nil) }
}

// bootShutdownRecord reads the shutdown record into rec and returns the
// UIDs it says to start, with why: none unless the previous boot record
// was readable, no boot has acted on the record before, it is not stale
// (staleShutdown), and onBoot is restore (WhyRestore) or the shutdown
// saved the guests (WhySaved). keepMissing: with onBoot: restore and a
// record that cannot be read, the MISSING VMs are the one evidence left
// of which VMs ran, so none is marked stopped.
func (h *Host) bootShutdownRecord(policy *Policy, rec *BootRecord, entries []vm.Entry) (restore map[string]string, keepMissing bool) {
	sr, err := LoadShutdownRecord(h.Layout)
	if err != nil {
		rec.Shutdown = &BootShutdown{Error: err.Error()}
		if policy.OnBoot == OnBootRestore {
			rec.Shutdown.Note = "no VM marked stopped: the VMs whose spec says running are what is left of which VMs ran"
			h.Log.Error("host boot: the shutdown record cannot be read: restoring nothing and marking no VM stopped, starting the autostart VMs", "err", err)
			return nil, true
		}
		return nil, false
	}
	if sr == nil {
		return nil, false
	}
	bs := &BootShutdown{Time: sr.Time, Running: len(sr.Running)}
	rec.Shutdown = bs
	if rec.PreviousError != "" {
		bs.Note = "not acted on: the previous boot record cannot be read, so whether a boot acted on this one already is unknown"
		return nil, false
	}
	if rec.ShutdownActedOn != nil && rec.ShutdownActedOn.Equal(sr.Time) {
		bs.Note = "an earlier boot acted on it already (the last shutdown was not clean, or this boot ran before)"
		return nil, false
	}
	if note := staleShutdown(sr, entries); note != "" {
		bs.Note = note
		h.Log.Warn("host boot: the shutdown record is stale: restoring nothing from it", "why", note)
		return nil, false
	}
	why := WhyRestore
	switch {
	case policy.OnBoot == OnBootRestore:
	case sr.OnShutdown == OnShutdownSave:
		// their state waits on disk: resumed whatever onBoot says, as
		// the shutdown that saved them promised
		why = WhySaved
	default:
		bs.Note = "onBoot is " + policy.OnBoot + ": only autostart VMs start"
		return nil, false
	}
	// acted on: used, and never again (only a used record is: one a
	// boot passed over stays for a boot whose policy restores)
	t := sr.Time
	rec.ShutdownActedOn = &t
	bs.Used = true
	restore = map[string]string{}
	for _, uid := range sr.Running {
		restore[strings.ToLower(uid)] = why
	}
	return restore, false
}

// staleShutdown says why the shutdown record is not the last clean
// shutdown ("" when it may be): a VM of ours was started after it. A
// shutdown-guests run by hand, or a reboot that never went down, leaves a
// record behind while the host runs on; VMs start and stop after it, and
// a power loss then must not bring back that old list.
func staleShutdown(sr *ShutdownRecord, entries []vm.Entry) string {
	var last *vm.Entry
	for i := range entries {
		e := &entries[i]
		if !e.Actionable() || !e.StartedAt.After(sr.Time) {
			continue
		}
		if last == nil || e.StartedAt.After(last.StartedAt) {
			last = e
		}
	}
	if last == nil {
		return ""
	}
	return fmt.Sprintf("stale: VM %q was started at %s, after this record was written: the host ran on after that shutdown, so it is not the last clean one",
		last.Name, last.StartedAt.Local().Format(time.DateTime))
}

// planBoot lists the VMs a boot starts (whyStart), by
// spec.startup.order, then name.
func planBoot(entries []vm.Entry, restore map[string]string) []BootVM {
	var plan []BootVM
	for _, e := range entries {
		why := whyStart(e, restore)
		if why == "" {
			continue
		}
		plan = append(plan, BootVM{Name: e.Name, UID: e.UID, Why: why, Order: e.StartupOrder, Delay: duration.Duration(e.StartupDelay)})
	}
	slices.SortStableFunc(plan, func(a, b BootVM) int {
		return compareStartup(startupKey{a.Order, a.Name, a.UID}, startupKey{b.Order, b.Name, b.UID})
	})
	return plan
}

// startupKey is where a VM stands in the boot's order.
type startupKey struct {
	order     int
	name, uid string
}

// compareStartup is the boot's order, the one comparator of the boot and
// the shutdown: spec.startup.order (lower first), then the name
// regardless of case, then the UID. The shutdown compares negated orders
// (highest first) and breaks ties alike.
func compareStartup(a, b startupKey) int {
	return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(strings.ToLower(a.name), strings.ToLower(b.name)), cmp.Compare(a.uid, b.uid))
}

// whyStart says why the boot starts e ("" when it does not): ours (MANAGED
// or MISSING), with spec.autostart or in restore (UID to why), or Saved
// with its spec saying running (its state waits on disk, whatever the
// shutdown record says).
func whyStart(e vm.Entry, restore map[string]string) string {
	switch {
	case !e.Actionable():
		return ""
	case e.Autostart:
		return WhyAutostart
	case restore[e.UID] != "":
		return restore[e.UID]
	case e.Phase == vm.PhaseSaved && e.SpecRunning:
		return WhySaved
	}
	return ""
}

// recheck reads v's VM again right before its start and says why it is
// not started after all (outcome "" when it is): deleted, no longer
// ours, running already, started and stopped by hand since the boot
// began, or no longer to start (its autostart turned off). v.Why follows
// the VM as it is now.
func recheck(ctx context.Context, vms bootVMs, v *BootVM, restore map[string]string, since time.Time) (outcome, note string) {
	e, err := vms.Peek(ctx, v.UID)
	switch {
	case errors.Is(err, vm.ErrNotFound):
		return BootNotStarted, "deleted since the boot began"
	case err != nil:
		return BootNotStarted, "it cannot be read again before its start: " + err.Error()
	case !e.Actionable():
		return BootNotStarted, fmt.Sprintf("no longer a VM virtcon acts on (%s)", e.Class)
	case e.Running():
		return BootAlreadyRunning, "started by someone else since the boot began"
	case e.StartedAt.After(since):
		return BootNotStarted, "started and stopped again since the boot began: left stopped"
	}
	why := whyStart(*e, restore)
	if why == "" {
		return BootNotStarted, "no longer to start: its autostart was turned off (or it was stopped) since the boot began"
	}
	v.Why = why
	return "", ""
}

// markStopped marks stopped the VMs whose spec says running but whose
// QEMU is gone (MISSING), and that the boot did not start: the reboot
// stopped them. A saved VM is left as it is.
func (h *Host) markStopped(ctx context.Context, vms bootVMs, entries []vm.Entry, plan []BootVM) []BootVM {
	planned := map[string]bool{}
	for _, v := range plan {
		planned[v.UID] = true
	}
	var out []BootVM
	for _, e := range entries {
		// a Saved VM is MANAGED, but its state on disk is the VM: never
		// marked stopped, whatever its class
		if e.Class != vm.ClassMissing || planned[e.UID] || e.Phase == vm.PhaseSaved {
			continue
		}
		v := BootVM{Name: e.Name, UID: e.UID, Order: e.StartupOrder, Delay: duration.Duration(e.StartupDelay), Outcome: BootMarkedStopped}
		changed, err := vms.MarkStopped(ctx, e.UID)
		switch {
		case err != nil:
			// it stays MISSING, which says as much; not a failure of the boot
			h.Log.Warn("host boot: vm not marked stopped", "vm", e.Name, "err", err)
			continue
		case !changed:
			continue
		}
		out = append(out, v)
	}
	return out
}

// logBoot logs the record's outcome in one line.
func (h *Host) logBoot(rec *BootRecord) {
	t := rec.Tally()
	args := []any{"network", rec.Network.Result, "steps", len(rec.Network.Steps), "wanted", t.Wanted, "started", t.Started,
		"alreadyRunning", t.AlreadyRunning, "failed", t.Failed, "markedStopped", t.MarkedStopped, "took", rec.Finished.Sub(rec.Time).Round(time.Millisecond)}
	if rec.PolicyError != "" || rec.Network.Result == NetFailed || t.Failed > 0 || rec.VMsError != "" {
		h.Log.Warn("host boot done, with problems", args...)
		return
	}
	h.Log.Info("host boot done", args...)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var _ bootVMs = (*vm.Manager)(nil)
var _ bootNet = (*netcfg.Service)(nil)
