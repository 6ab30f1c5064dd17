package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// fakeGuest is how one fake VM behaves when it is told to go down.
type fakeGuest struct {
	// powerOff is how long its guest takes to power off by ACPI; <0: deaf.
	powerOff time.Duration
	stopErr  error
	// save is how long its save takes; saveErr makes it fail.
	save    time.Duration
	saveErr error
	// lockHeld: another process holds the VM's lock; every call waits
	// for it until its ctx ends (at most 5s, so that an unbounded call
	// fails the test instead of hanging it).
	lockHeld bool
	// interrupted: a graceful stop is interrupted by its ctx's end (it had
	// its lock late, and the power button's wait ran past the bound), as
	// vm.Manager.PowerOff is; a forced one quits.
	interrupted bool
}

// waitLock is a lock wait that lasts until ctx ends, as flock.Acquire's.
func waitLock(ctx context.Context, uid string) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("lock %s: %w (%w)", uid, flock.ErrLocked, ctx.Err())
	case <-time.After(5 * time.Second):
		return fmt.Errorf("lock %s: waited 5s: the call is not bounded", uid)
	}
}

// fakeGuests is the VM manager of a shutdown test: it counts how many
// guests go down at once and keeps what each call was asked.
type fakeGuests struct {
	t       *testing.T
	entries []vm.Entry
	guests  map[string]fakeGuest // by UID
	// firstRecord is the record as written before the first stop.
	records func() []ShutdownReport

	mu        sync.Mutex
	busy, max int
	stops     map[string]vm.StopOptions
	saves     []string
	order     []string
	// calls counts each VM's PowerOff and Save calls; down are those that
	// went down (the listing shows them stopped from then on).
	calls map[string]int
	down  map[string]bool
	// events are "+uid" as a VM's call begins and "-uid" as it ends.
	events []string
}

func (f *fakeGuests) List(context.Context) ([]vm.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.entries)
	for i := range out {
		if f.down[out[i].UID] {
			out[i].PID, out[i].Phase = 0, vm.PhaseStopped
		}
	}
	return out, nil
}

// wentDown records that uid's QEMU is gone.
func (f *fakeGuests) wentDown(uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down == nil {
		f.down = map[string]bool{}
	}
	f.down[uid] = true
}

func (f *fakeGuests) enter(uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.records != nil && len(f.records()) == 0 {
		f.t.Errorf("vm %s went down before the shutdown record was written", uid)
	}
	f.busy++
	f.max = max(f.max, f.busy)
	f.order = append(f.order, uid)
	f.events = append(f.events, "+"+uid)
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[uid]++
}

func (f *fakeGuests) leave(uid string) {
	f.mu.Lock()
	f.busy--
	f.events = append(f.events, "-"+uid)
	f.mu.Unlock()
}

func (f *fakeGuests) PowerOff(ctx context.Context, uid string, opts vm.StopOptions) (vm.StopResult, error) {
	f.enter(uid)
	defer f.leave(uid)
	f.mu.Lock()
	if f.stops == nil {
		f.stops = map[string]vm.StopOptions{}
	}
	f.stops[uid] = opts
	g := f.guests[uid]
	f.mu.Unlock()
	switch {
	case g.lockHeld:
		return vm.StopResult{}, waitLock(ctx, uid)
	case g.interrupted && !opts.Now:
		select {
		case <-ctx.Done():
			return vm.StopResult{}, &vm.StopInterruptedError{Name: uid, Pressed: true, Err: ctx.Err()}
		case <-time.After(5 * time.Second):
			return vm.StopResult{}, fmt.Errorf("vm %s: waited 5s: the call is not bounded", uid)
		}
	case g.stopErr != nil:
		return vm.StopResult{}, g.stopErr
	case opts.Now:
		f.wentDown(uid)
		return vm.StopResult{How: vm.StoppedQuit}, nil
	case g.powerOff >= 0 && g.powerOff <= opts.Timeout:
		time.Sleep(g.powerOff)
		f.wentDown(uid)
		return vm.StopResult{How: vm.StoppedACPI}, nil
	}
	time.Sleep(opts.Timeout) // deaf, or too slow: quit at the deadline, if forced
	if !opts.Force {
		return vm.StopResult{}, &vm.StopTimeoutError{Name: uid, Timeout: opts.Timeout}
	}
	f.wentDown(uid)
	return vm.StopResult{How: vm.StoppedQuit}, nil
}

func (f *fakeGuests) Save(ctx context.Context, uid string) (*vm.SaveResult, error) {
	f.enter(uid)
	defer f.leave(uid)
	f.mu.Lock()
	f.saves = append(f.saves, uid)
	g := f.guests[uid]
	f.mu.Unlock()
	if g.lockHeld {
		return nil, waitLock(ctx, uid)
	}
	select {
	case <-time.After(g.save):
	case <-ctx.Done():
		return nil, fmt.Errorf("vm %s: save: %w", uid, ctx.Err())
	}
	if g.saveErr != nil {
		return nil, g.saveErr
	}
	f.wentDown(uid)
	return &vm.SaveResult{Bytes: 1000}, nil
}

// newShutdown runs against guests; it returns the shutdown and the
// records it wrote, in order.
func newShutdown(t *testing.T, f *fakeGuests) (*shutdown, func() []ShutdownReport) {
	var mu sync.Mutex
	var written []ShutdownReport
	records := func() []ShutdownReport {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(written)
	}
	f.t, f.records = t, records
	s := &shutdown{g: f, log: testutil.Logger(t), write: func(r *ShutdownReport) error {
		mu.Lock()
		defer mu.Unlock()
		c := *r
		c.Running, c.Outcomes = slices.Clone(r.Running), slices.Clone(r.Outcomes)
		written = append(written, c)
		return nil
	}, load: func() (*ShutdownRecord, error) {
		// shutdown.json: the last record written
		mu.Lock()
		defer mu.Unlock()
		if len(written) == 0 {
			return nil, nil
		}
		r := written[len(written)-1].ShutdownRecord
		r.Running = slices.Clone(r.Running)
		return &r, nil
	}}
	return s, records
}

func running(names ...string) []vm.Entry {
	var out []vm.Entry
	for i, n := range names {
		out = append(out, vm.Entry{Name: n, UID: "uid-" + n, Class: vm.ClassManaged, Phase: vm.PhaseRunning, PID: 100 + i})
	}
	return out
}

func policy(mode string, timeout time.Duration, parallel int) *Policy {
	d := duration.Duration(timeout)
	p := &Policy{APIVersion: PolicyAPIVersion, Kind: PolicyKind, OnShutdown: mode, ShutdownTimeout: &d, ParallelShutdown: parallel}
	p.defaults()
	return p
}

func outcomes(r *ShutdownReport) map[string]string {
	out := map[string]string{}
	for _, o := range r.Outcomes {
		out[o.Name] = o.Outcome
	}
	return out
}

// At most Parallel guests go down at once, and the whole takes about
// ⌈n/Parallel⌉ guests' time, not the sum.
func TestShutdownParallelismBound(t *testing.T) {
	t.Parallel()
	const each = 100 * time.Millisecond
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	f := &fakeGuests{entries: running(names...), guests: map[string]fakeGuest{}}
	for _, n := range names {
		f.guests["uid-"+n] = fakeGuest{powerOff: each}
	}
	s, _ := newShutdown(t, f)
	start := time.Now()
	rep, err := s.run(context.Background(), policy(OnShutdownShutdown, time.Minute, 4), ShutdownOptions{})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if f.max != 4 {
		t.Errorf("at most %d guests went down at once; want 4 (parallelShutdown)", f.max)
	}
	if took < 3*each || took > 3*each+2*each {
		t.Errorf("took %v; want about 3 rounds of %v (⌈10/4⌉), not the sum %v", took, each, 10*each)
	}
	if n := rep.Count(ShutdownPoweredOff); n != 10 {
		t.Errorf("%d powered off; want 10: %v", n, outcomes(rep))
	}
}

// The deadline is one for the whole shutdown: a guest whose turn comes
// late gets what is left, and one whose turn comes after it is quit at once.
func TestShutdownSharedDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 400 * time.Millisecond
	f := &fakeGuests{entries: running("a-deaf", "b-deaf", "c-quick"), guests: map[string]fakeGuest{
		"uid-a-deaf": {powerOff: -1}, "uid-b-deaf": {powerOff: -1}, "uid-c-quick": {powerOff: 10 * time.Millisecond},
	}}
	s, _ := newShutdown(t, f)
	start := time.Now()
	rep, err := s.run(context.Background(), policy(OnShutdownShutdown, timeout, 1), ShutdownOptions{})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > timeout+200*time.Millisecond {
		t.Errorf("took %v; want about the one timeout %v, not one per guest", took, timeout)
	}
	if a := f.stops["uid-a-deaf"]; a.Now || !a.Force || a.Timeout < timeout-100*time.Millisecond || a.Timeout > timeout {
		t.Errorf("the first guest got %+v; want about the whole %v, forced (QEMU ended at the deadline)", a, timeout)
	}
	for _, uid := range []string{"uid-b-deaf", "uid-c-quick"} {
		if o := f.stops[uid]; !o.Now {
			t.Errorf("%s, whose turn came at the deadline, got %+v; want it quit at once", uid, o)
		}
	}
	want := map[string]string{"a-deaf": ShutdownQuit, "b-deaf": ShutdownQuit, "c-quick": ShutdownQuit}
	if got := outcomes(rep); !equalMaps(got, want) {
		t.Errorf("outcomes %v; want %v", got, want)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Every way a VM goes down has its outcome; guests that are not ours are
// left alone, unreadable ones of ours reported; the record names exactly
// the running VMs, before anything stops, then gets the outcomes.
func TestShutdownOutcomesAndRecord(t *testing.T) {
	t.Parallel()
	entries := append(running("acpi", "deaf", "gone", "broken", "killed"),
		vm.Entry{Name: "off", UID: "uid-off", Class: vm.ClassManaged, Phase: vm.PhaseStopped},
		vm.Entry{Name: "missing", UID: "uid-missing", Class: vm.ClassMissing, Phase: vm.PhaseStopped},
		vm.Entry{Name: "saved", UID: "uid-saved", Class: vm.ClassManaged, Phase: vm.PhaseSaved},
		vm.Entry{Name: "libvirt-guest", UID: "uid-ext", Class: vm.ClassExternal, Phase: vm.PhaseRunning, PID: 900},
		vm.Entry{Name: "orphan", UID: "uid-orphan", Class: vm.ClassOrphaned, Phase: vm.PhaseRunning, PID: 901},
		vm.Entry{Name: "unreadable", UID: "uid-unreadable", Class: vm.ClassUnreadable, Phase: vm.PhaseRunning, PID: 902, Message: "spec unreadable"},
	)
	f := &fakeGuests{entries: entries, guests: map[string]fakeGuest{
		"uid-acpi": {powerOff: 0}, "uid-deaf": {powerOff: -1},
		"uid-broken": {stopErr: errors.New("vm \"broken\": stop: kill 7: operation not permitted")},
	}}
	// PowerOff of "gone" and "killed" answer as the manager does
	g := &outcomeGuests{fakeGuests: f, how: map[string]string{"uid-gone": vm.StoppedNotRunning, "uid-killed": vm.StoppedKilled}}
	s, records := newShutdown(t, f)
	s.g = g
	var progress []ShutdownProgress
	rep, err := s.run(context.Background(), policy(OnShutdownShutdown, 200*time.Millisecond, 4), ShutdownOptions{
		Progress: func(p ShutdownProgress) { progress = append(progress, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"acpi": ShutdownPoweredOff, "deaf": ShutdownQuit, "gone": ShutdownGone, "broken": ShutdownFailed,
		"killed": ShutdownKilled, "unreadable": ShutdownSkipped}
	if got := outcomes(rep); !equalMaps(got, want) {
		t.Errorf("outcomes %v; want %v", got, want)
	}
	for uid := range f.stops {
		if !slices.Contains([]string{"uid-acpi", "uid-deaf", "uid-gone", "uid-broken", "uid-killed"}, uid) {
			t.Errorf("%s was stopped; only our running VMs are", uid)
		}
	}
	wantRunning := []string{"uid-acpi", "uid-broken", "uid-deaf", "uid-gone", "uid-killed"}
	recs := records()
	if len(recs) != 2 {
		t.Fatalf("%d records written; want 2 (before, then completed)", len(recs))
	}
	first, last := recs[0], recs[1]
	if got := slices.Sorted(slices.Values(first.Running)); !slices.Equal(got, wantRunning) {
		t.Errorf("the first record names %v; want exactly the running VMs %v", got, wantRunning)
	}
	if first.Finished != nil || len(first.Outcomes) != 1 || first.OnShutdown != OnShutdownShutdown {
		t.Errorf("the first record: %+v; want no end, no outcome but the skipped VM's, onShutdown shutdown", first)
	}
	if last.Finished == nil || len(last.Outcomes) != 6 || !slices.Equal(slices.Sorted(slices.Values(last.Running)), wantRunning) {
		t.Errorf("the last record: %+v; want finished with 6 outcomes", last)
	}
	for _, o := range rep.Outcomes {
		if o.Outcome == ShutdownFailed && o.Error == "" {
			t.Errorf("%s failed without an error", o.Name)
		}
	}
	// each VM: begun, then ended; Done counts up to the total
	if n := len(progress); n != 10 {
		t.Errorf("%d progress calls; want 10 (5 begun, 5 ended)", n)
	}
	if last := progress[len(progress)-1]; last.Done != 6 || last.Total != 6 {
		t.Errorf("the last progress: %d of %d; want 6 of 6", last.Done, last.Total)
	}
}

// outcomeGuests answers PowerOff for some UIDs with a fixed result.
type outcomeGuests struct {
	*fakeGuests
	how map[string]string
}

func (g *outcomeGuests) PowerOff(ctx context.Context, uid string, opts vm.StopOptions) (vm.StopResult, error) {
	if h, ok := g.how[uid]; ok {
		g.enter(uid)
		defer g.leave(uid)
		g.mu.Lock()
		if g.stops == nil {
			g.stops = map[string]vm.StopOptions{}
		}
		g.stops[uid] = opts
		g.mu.Unlock()
		return vm.StopResult{How: h}, nil
	}
	return g.fakeGuests.PowerOff(ctx, uid, opts)
}

func TestShutdownKillQuitsAtOnce(t *testing.T) {
	t.Parallel()
	f := &fakeGuests{entries: running("a", "b", "c"), guests: map[string]fakeGuest{}}
	s, _ := newShutdown(t, f)
	rep, err := s.run(context.Background(), policy(OnShutdownKill, time.Minute, 4), ShutdownOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for uid, o := range f.stops {
		if !o.Now {
			t.Errorf("%s: %+v; want quit at once (onShutdown: kill)", uid, o)
		}
	}
	if n := rep.Count(ShutdownQuit); n != 3 {
		t.Errorf("%d quit; want 3", n)
	}
}

// onShutdown save saves N at once, by the deadline less a fallback window
// (a third of the timeout, at most 30s); a guest whose save fails, or runs
// past that, is powered off by ACPI in the window, as with onShutdown:
// shutdown, and quit at the deadline only if it does not power off.
func TestShutdownSave(t *testing.T) {
	t.Parallel()
	const timeout = 600 * time.Millisecond // the window: 200ms
	f := &fakeGuests{entries: running("a", "b", "c", "fails", "slow", "slowdeaf"), guests: map[string]fakeGuest{
		"uid-a": {save: 100 * time.Millisecond}, "uid-b": {save: 100 * time.Millisecond}, "uid-c": {save: 100 * time.Millisecond},
		"uid-fails":    {saveErr: errors.New("migration failed: disk full"), powerOff: 0},
		"uid-slow":     {save: time.Hour, powerOff: 10 * time.Millisecond},
		"uid-slowdeaf": {save: time.Hour, powerOff: -1},
	}}
	s, _ := newShutdown(t, f)
	start := time.Now()
	rep, err := s.run(context.Background(), policy(OnShutdownSave, timeout, 2), ShutdownOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > timeout+300*time.Millisecond {
		t.Errorf("took %v; want about the timeout (%v)", took, timeout)
	}
	if f.max != 2 {
		t.Errorf("%d at once; want 2", f.max)
	}
	want := map[string]string{"a": ShutdownSaved, "b": ShutdownSaved, "c": ShutdownSaved, "fails": ShutdownPoweredOff,
		"slow": ShutdownPoweredOff, "slowdeaf": ShutdownQuit}
	if got := outcomes(rep); !equalMaps(got, want) {
		t.Errorf("outcomes %v; want %v", got, want)
	}
	for _, uid := range []string{"uid-slow", "uid-slowdeaf"} {
		// the save had until 400ms: the power button then gets the rest
		if o := f.stops[uid]; o.Now || !o.Force || o.Timeout <= 100*time.Millisecond || o.Timeout > 200*time.Millisecond {
			t.Errorf("%s, whose save ran past its time, got %+v; want the ACPI power button with about the 200ms window", uid, o)
		}
	}
	for _, o := range rep.Outcomes {
		switch o.Name {
		case "fails", "slow", "slowdeaf":
			if o.Note == "" {
				t.Errorf("%s: no note that its save failed", o.Name)
			}
		case "a":
			if o.SavedBytes != 1000 {
				t.Errorf("a: saved bytes %d; want 1000", o.SavedBytes)
			}
		}
	}
	if len(f.saves) != 6 {
		t.Errorf("saves %v; want all six tried", f.saves)
	}
}

// A guest whose turn comes after the saves' time is not saved: it is
// powered off by ACPI in what is left.
func TestShutdownSaveTurnTooLate(t *testing.T) {
	t.Parallel()
	f := &fakeGuests{entries: running("a-slow", "b-late"), guests: map[string]fakeGuest{
		"uid-a-slow": {save: time.Hour, powerOff: 0}, "uid-b-late": {save: 0, powerOff: 0},
	}}
	s, _ := newShutdown(t, f)
	rep, err := s.run(context.Background(), policy(OnShutdownSave, 600*time.Millisecond, 1), ShutdownOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a-slow": ShutdownPoweredOff, "b-late": ShutdownPoweredOff}
	if got := outcomes(rep); !equalMaps(got, want) || slices.Contains(f.saves, "uid-b-late") {
		t.Errorf("outcomes %v, saves %v; want both powered off, b-late not saved", got, f.saves)
	}
	if o := f.stops["uid-b-late"]; o.Now || !o.Force || o.Timeout <= 0 {
		t.Errorf("b-late got %+v; want the power button with what is left", o)
	}
}

func TestShutdownRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, opts := range []ShutdownOptions{{Timeout: -time.Second}, {Parallel: -1}, {Parallel: 1000}, {OnShutdown: "hibernate"}} {
		f := &fakeGuests{entries: running("a"), guests: map[string]fakeGuest{}}
		s, records := newShutdown(t, f)
		_, err := s.run(context.Background(), DefaultPolicy(), opts)
		if !errors.Is(err, ErrInvalidShutdown) || !errors.Is(err, fielderr.ErrInvalid) {
			t.Errorf("%+v: got %v; want ErrInvalidShutdown", opts, err)
		}
		if len(f.stops)+len(records()) != 0 {
			t.Errorf("%+v: refused, yet it stopped %v and wrote %d records", opts, f.stops, len(records()))
		}
	}
}

// A broken host.yaml does not keep the guests from a clean shutdown: the
// defaults are used, the report says why, and the record is on disk.
func TestShutdownGuestsWithBrokenPolicy(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	layout := paths.New(root)
	if err := os.MkdirAll(layout.ConfigDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(PolicyFile(layout), []byte("apiVersion: virtcon/v1\nkind: HostPolicy\nonShutdown: hibernate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := New(Options{Layout: layout, HostRoot: t.TempDir(), Logger: testutil.Logger(t)})
	if err := os.MkdirAll(filepath.Join(h.HostRoot, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := h.ShutdownGuests(context.Background(), ShutdownOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.PolicyError == "" || rep.OnShutdown != OnShutdownShutdown || rep.Timeout.D() != DefaultShutdownTimeout || rep.Parallel != DefaultParallelShutdown {
		t.Errorf("report %+v; want the defaults and the policy's error", rep)
	}
	rec, err := LoadShutdownRecord(layout)
	if err != nil || rec == nil || len(rec.Running) != 0 || rec.Time.IsZero() {
		t.Errorf("LoadShutdownRecord: %+v, %v; want a record naming no VM", rec, err)
	}
	st, err := os.Stat(ShutdownRecordFile(layout))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("record file: %v, %v; want 0600", st, err)
	}
}

// A second shutdown in the same boot that finds nothing running (systemd's
// stop of virtcon-guests.service after virt host reboot ran one) keeps the
// record of the first; a record of an earlier boot is replaced.
func TestShutdownKeepsThisBootsRecord(t *testing.T) {
	t.Parallel()
	boot := proc.BootID()
	if boot == "" {
		t.Skip("no boot id readable here (/proc/sys/kernel/random/boot_id)")
	}
	for _, tc := range []struct {
		name     string
		prev     *ShutdownRecord
		running  []vm.Entry
		wantKept bool
	}{
		{"this boot's, nothing running now", &ShutdownRecord{BootID: boot, Running: []string{"uid-a"}}, nil, true},
		{"an earlier boot's", &ShutdownRecord{BootID: "another-boot", Running: []string{"uid-a"}}, nil, false},
		{"this boot's, but it found nothing either", &ShutdownRecord{BootID: boot, Running: []string{}}, nil, false},
		{"this boot's, and a VM runs now", &ShutdownRecord{BootID: boot, Running: []string{"uid-a"}}, running("b"), false},
		{"none", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeGuests{entries: tc.running, guests: map[string]fakeGuest{"uid-b": {}}}
			s, records := newShutdown(t, f)
			s.load = func() (*ShutdownRecord, error) { return tc.prev, nil }
			rep, err := s.run(context.Background(), policy(OnShutdownShutdown, time.Second, 4), ShutdownOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.RecordKept != tc.wantKept || (len(records()) == 0) != tc.wantKept {
				t.Errorf("kept %v, %d records written; want kept %v (and no write when kept)", rep.RecordKept, len(records()), tc.wantKept)
			}
		})
	}
}

// A second shutdown in the same boot that finds VMs running (one the
// first could not stop, one it skipped) writes a record that still names
// the VMs the first took down, less those started since and not running
// now; a save by either is the record's.
func TestShutdownSecondRunMergesTheFirstsRecord(t *testing.T) {
	t.Parallel()
	boot := proc.BootID()
	if boot == "" {
		t.Skip("no boot id readable here (/proc/sys/kernel/random/boot_id)")
	}
	first := time.Now().Add(-time.Minute).UTC()
	unreadable := vm.Entry{UID: "uid-x", Class: vm.ClassUnreadable, Phase: vm.PhaseRunning, PID: 99, Message: "spec unreadable"}
	restarted := vm.Entry{Name: "c", UID: "uid-c", Class: vm.ClassManaged, Phase: vm.PhaseStopped, StartedAt: first.Add(30 * time.Second)}
	before := vm.Entry{Name: "a", UID: "uid-a", Class: vm.ClassManaged, Phase: vm.PhaseStopped, StartedAt: first.Add(-time.Hour)}
	for _, tc := range []struct {
		name     string
		prev     ShutdownRecord
		entries  []vm.Entry
		running  []string
		mode     string
		wantKept bool
	}{
		{"a skipped VM runs on", ShutdownRecord{BootID: boot, Time: first, OnShutdown: OnShutdownShutdown, Running: []string{"uid-a", "uid-b", "uid-c"}},
			[]vm.Entry{unreadable}, []string{"uid-a", "uid-b", "uid-c"}, OnShutdownShutdown, false},
		{"one the first could not stop", ShutdownRecord{BootID: boot, Time: first, OnShutdown: OnShutdownShutdown, Running: []string{"uid-a", "uid-b", "uid-c"}},
			running("b"), []string{"uid-a", "uid-b", "uid-c"}, OnShutdownShutdown, false},
		{"one started and stopped since is dropped", ShutdownRecord{BootID: boot, Time: first, OnShutdown: OnShutdownShutdown, Running: []string{"uid-a", "uid-b", "uid-c"}},
			append(running("b"), restarted, before), []string{"uid-a", "uid-b"}, OnShutdownShutdown, false},
		{"nothing running, nothing dropped: the first's kept", ShutdownRecord{BootID: boot, Time: first, OnShutdown: OnShutdownShutdown, Running: []string{"uid-a"}},
			[]vm.Entry{before}, []string{"uid-a"}, OnShutdownShutdown, true},
		{"nothing running, one dropped: rewritten", ShutdownRecord{BootID: boot, Time: first, OnShutdown: OnShutdownShutdown, Running: []string{"uid-a", "uid-c"}},
			[]vm.Entry{before, restarted}, []string{"uid-a"}, OnShutdownShutdown, false},
		{"the first saved", ShutdownRecord{BootID: boot, Time: first, OnShutdown: OnShutdownSave, Running: []string{"uid-a", "uid-c"}},
			running("b"), []string{"uid-a", "uid-c", "uid-b"}, OnShutdownSave, false},
		{"an earlier boot's is not merged", ShutdownRecord{BootID: "another-boot", Time: first, OnShutdown: OnShutdownSave, Running: []string{"uid-a", "uid-c"}},
			running("b"), []string{"uid-b"}, OnShutdownShutdown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeGuests{entries: tc.entries, guests: map[string]fakeGuest{"uid-b": {powerOff: 0}}}
			s, records := newShutdown(t, f)
			prev := tc.prev
			s.load = func() (*ShutdownRecord, error) { return &prev, nil }
			rep, err := s.run(context.Background(), policy(OnShutdownShutdown, time.Second, 4), ShutdownOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.RecordKept != tc.wantKept {
				t.Fatalf("kept %v; want %v", rep.RecordKept, tc.wantKept)
			}
			if tc.wantKept {
				if n := len(records()); n != 0 {
					t.Errorf("%d records written; want the first's kept", n)
				}
				return
			}
			recs := records()
			if len(recs) == 0 {
				t.Fatal("no record written")
			}
			for i, r := range recs {
				if !slices.Equal(r.Running, tc.running) || r.OnShutdown != tc.mode {
					t.Errorf("record %d: running %v, onShutdown %s; want %v, %s", i, r.Running, r.OnShutdown, tc.running, tc.mode)
				}
			}
		})
	}
}

// Two shutdowns at once (virt host reboot, and systemd's stop of
// virtcon-guests.service) take turns on the host's shutdown lock: each VM
// goes down once, and the second finds nothing left and keeps the first's
// record.
func TestShutdownsTakeTurns(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	f := &fakeGuests{entries: running("a", "b", "c"), guests: map[string]fakeGuest{
		"uid-a": {powerOff: 100 * time.Millisecond}, "uid-b": {powerOff: 100 * time.Millisecond}, "uid-c": {powerOff: 100 * time.Millisecond},
	}}
	s1, records := newShutdown(t, f)
	s2 := *s1
	for _, s := range []*shutdown{s1, &s2} {
		s.lock = func(ctx context.Context) (func(), error) { return lockShutdown(ctx, layout) }
	}
	reps := make([]*ShutdownReport, 2)
	var wg sync.WaitGroup
	for i, s := range []*shutdown{s1, &s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := s.run(context.Background(), policy(OnShutdownShutdown, 5*time.Second, 4), ShutdownOptions{})
			if err != nil {
				t.Error(err)
			}
			reps[i] = rep
		}()
	}
	wg.Wait()
	for uid, n := range f.calls {
		if n != 1 {
			t.Errorf("%s was stopped %d times; want once (the shutdowns interleaved)", uid, n)
		}
	}
	if reps[0] == nil || reps[1] == nil {
		t.Fatal("a shutdown returned no report")
	}
	if n0, n1 := len(reps[0].Outcomes), len(reps[1].Outcomes); n0+n1 != 3 || min(n0, n1) != 0 {
		t.Errorf("outcomes %d and %d; want all three in one shutdown, none in the other", n0, n1)
	}
	for _, r := range reps {
		if r.LockError != "" {
			t.Errorf("lock error %q; want the second to wait for the first", r.LockError)
		}
	}
	if proc.BootID() != "" {
		if !reps[0].RecordKept && !reps[1].RecordKept {
			t.Error("the second shutdown did not keep the first's record")
		}
		if recs := records(); len(recs) != 2 || len(recs[1].Running) != 3 {
			t.Errorf("records %+v; want the first's two, naming the three", recs)
		}
	}
}

// A shutdown waits for the host's shutdown lock by its own deadline only:
// then it goes on without it, and says so.
func TestShutdownLockWaitIsBounded(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	release, err := lockShutdown(context.Background(), layout)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	f := &fakeGuests{entries: running("a"), guests: map[string]fakeGuest{"uid-a": {powerOff: 0}}}
	s, _ := newShutdown(t, f)
	s.lock = func(ctx context.Context) (func(), error) { return lockShutdown(ctx, layout) }
	start := time.Now()
	rep, err := s.run(context.Background(), policy(OnShutdownShutdown, 300*time.Millisecond, 4), ShutdownOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Errorf("took %v; want about the 300ms deadline spent waiting", took)
	}
	if rep.LockError == "" || !f.stops["uid-a"].Now {
		t.Errorf("lock error %q, stop %+v; want the lock named and the guest quit at the deadline", rep.LockError, f.stops["uid-a"])
	}
}

// A VM whose lock another process holds (a long vm stop or save) cannot
// hold the host's power-off back: its power-off is bounded by the
// shutdown's deadline plus a grace, and it fails saying its lock was
// held. A graceful stop cut by that bound is quit instead. The others go
// down as usual.
func TestShutdownBoundsEachVM(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{OnShutdownShutdown, OnShutdownSave, OnShutdownKill} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := &fakeGuests{entries: running("held", "late", "ok"), guests: map[string]fakeGuest{
				"uid-held": {lockHeld: true}, "uid-late": {interrupted: true, saveErr: errors.New("save: boom")}, "uid-ok": {powerOff: 0},
			}}
			s, _ := newShutdown(t, f)
			s.grace = 100 * time.Millisecond
			start := time.Now()
			rep, err := s.run(context.Background(), policy(mode, 300*time.Millisecond, 4), ShutdownOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("took %v; want about the 300ms deadline and the grace", took)
			}
			want := map[string]string{"held": ShutdownFailed, "late": ShutdownQuit, "ok": ShutdownQuit}
			switch mode {
			case OnShutdownShutdown:
				want["ok"] = ShutdownPoweredOff
			case OnShutdownSave:
				want["ok"] = ShutdownSaved
			}
			if got := outcomes(rep); !equalMaps(got, want) {
				t.Errorf("outcomes %v; want %v", got, want)
			}
			for _, o := range rep.Outcomes {
				if o.Name == "held" && (!strings.Contains(o.Error, "its lock was held") || !strings.Contains(o.Error, "locked by another virtcon process")) {
					t.Errorf("held: error %q; want it to say its lock was held", o.Error)
				}
			}
		})
	}
}

// The shutdown is the boot's order reversed: by order group, highest
// first, each group down before the next begins (in parallel within it),
// ties broken as the boot breaks them (the name regardless of case, then
// the UID).
func TestShutdownOrder(t *testing.T) {
	t.Parallel()
	entries := func() []vm.Entry {
		es := running("db", "App", "api", "web", "Cache", "b")
		for i, order := range []int{0, 10, 10, 10, 5, 5} {
			es[i].StartupOrder = order
		}
		return es
	}
	t.Run("one at a time", func(t *testing.T) {
		t.Parallel()
		f := &fakeGuests{entries: entries(), guests: map[string]fakeGuest{}}
		s, _ := newShutdown(t, f)
		rep, err := s.run(context.Background(), policy(OnShutdownShutdown, time.Minute, 1), ShutdownOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"uid-api", "uid-App", "uid-web", "uid-b", "uid-Cache", "uid-db"}
		if !slices.Equal(f.order, want) {
			t.Errorf("went down in the order %v; want %v (order 10, 5, 0; by name regardless of case)", f.order, want)
		}
		var got []string
		for _, o := range rep.Outcomes {
			got = append(got, o.UID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("outcomes in the order %v; want %v", got, want)
		}
	})
	t.Run("groups in parallel", func(t *testing.T) {
		t.Parallel()
		f := &fakeGuests{entries: entries(), guests: map[string]fakeGuest{}}
		for _, e := range f.entries {
			f.guests[e.UID] = fakeGuest{powerOff: 50 * time.Millisecond}
		}
		s, _ := newShutdown(t, f)
		if _, err := s.run(context.Background(), policy(OnShutdownShutdown, time.Minute, 4), ShutdownOptions{}); err != nil {
			t.Fatal(err)
		}
		group := map[string]int{}
		for _, e := range f.entries {
			group[e.UID] = e.StartupOrder
		}
		// every VM's start comes after the end of every VM of a higher order
		ended := map[string]bool{}
		for _, ev := range f.events {
			uid := ev[1:]
			if ev[0] == '-' {
				ended[uid] = true
				continue
			}
			for other, order := range group {
				if order > group[uid] && !ended[other] {
					t.Errorf("%s (order %d) went down before %s (order %d) was down: events %v", uid, group[uid], other, order, f.events)
				}
			}
		}
		if f.max != 3 {
			t.Errorf("at most %d at once; want 3 (the order-10 group, in parallel)", f.max)
		}
	})
}

// shutdown-guests sets the "shutting down" marker, of this boot, before it
// stops anything.
func TestShutdownMarksShuttingDown(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	f := &fakeGuests{entries: running("a"), guests: map[string]fakeGuest{"uid-a": {powerOff: 0}}}
	s, _ := newShutdown(t, f)
	var markedBeforeStop bool
	s.mark = func(at time.Time) error { return markShuttingDown(layout, at) }
	g := &hookGuests{fakeGuests: f, before: func() { markedBeforeStop = errors.Is(shuttingDown(layout), ErrHostShuttingDown) }}
	s.g = g
	if _, err := s.run(context.Background(), policy(OnShutdownShutdown, time.Second, 4), ShutdownOptions{}); err != nil {
		t.Fatal(err)
	}
	if !markedBeforeStop {
		t.Error("the marker was not set when the first VM went down")
	}
	var m ShuttingDown
	if ok, err := readRecord(ShuttingDownFile(layout), &m); !ok || err != nil || m.BootID != proc.BootID() || m.Time.IsZero() {
		t.Errorf("marker %+v (%v, %v); want this boot's, with its time", m, ok, err)
	}
}

// hookGuests runs before ahead of each PowerOff.
type hookGuests struct {
	*fakeGuests
	before func()
}

func (g *hookGuests) PowerOff(ctx context.Context, uid string, opts vm.StopOptions) (vm.StopResult, error) {
	g.before()
	return g.fakeGuests.PowerOff(ctx, uid, opts)
}
