package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// fakeVMs is the VM service as the boot sees it: a listing, and starts
// that make a VM run (or fail).
type fakeVMs struct {
	mu      sync.Mutex
	entries []vm.Entry
	listErr error
	fail    map[string]error // by UID
	started []string         // UIDs, in order
	marked  []string
}

func (f *fakeVMs) List(context.Context) ([]vm.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	return slices.Clone(f.entries), nil
}

func (f *fakeVMs) Peek(_ context.Context, ref string) (*vm.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.entries {
		if e.UID == ref {
			return &e, nil
		}
	}
	return nil, fmt.Errorf("vm %q: %w", ref, vm.ErrNotFound)
}

func (f *fakeVMs) Start(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, ref)
	if err := f.fail[ref]; err != nil {
		return err
	}
	for i := range f.entries {
		if f.entries[i].UID == ref {
			f.entries[i].Class, f.entries[i].Phase, f.entries[i].PID = vm.ClassManaged, vm.PhaseRunning, 1000+i
		}
	}
	return nil
}

func (f *fakeVMs) MarkStopped(_ context.Context, ref string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.entries {
		if f.entries[i].UID == ref && f.entries[i].Class == vm.ClassMissing {
			f.entries[i].Class = vm.ClassManaged
			f.marked = append(f.marked, ref)
			return true, nil
		}
	}
	return false, nil
}

// fakeNet is the network service: what a rollback found, a try on trial,
// and the reapply's steps (once; then the host has its network).
type fakeNet struct {
	resolved   *netcfg.ResolvedTry
	resolveErr error
	pending    *netcfg.Pending
	steps      []string
	none       bool
	applyErr   error
	reapplied  int
}

func (f *fakeNet) ResolveExpiredTry(context.Context) (*netcfg.ResolvedTry, error) {
	r := f.resolved
	f.resolved = nil
	return r, f.resolveErr
}

func (f *fakeNet) PendingTry() (*netcfg.Pending, error) { return f.pending, nil }

func (f *fakeNet) Reapply(context.Context) (*netcfg.Result, error) {
	f.reapplied++
	if f.applyErr != nil {
		return nil, f.applyErr
	}
	if f.none {
		return nil, nil
	}
	steps := f.steps
	f.steps = nil
	return &netcfg.Result{Steps: slices.Clone(steps), Changed: len(steps) > 0}, nil
}

// sleeps records the boot's waits without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func testHost(t *testing.T) *Host {
	t.Helper()
	return New(Options{Layout: paths.New(t.TempDir()), Logger: testutil.Logger(t)})
}

func writePolicy(t *testing.T, h *Host, body string) {
	t.Helper()
	if err := os.MkdirAll(h.Layout.ConfigDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(PolicyFile(h.Layout), []byte("apiVersion: virtcon/v1\nkind: HostPolicy\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// stopped is a VM of ours, not running; opts set autostart, order, delay.
func stopped(name string, autostart bool, order int, delay time.Duration) vm.Entry {
	return vm.Entry{Name: name, UID: "uid-" + name, Class: vm.ClassManaged, Phase: vm.PhaseStopped,
		Autostart: autostart, StartupOrder: order, StartupDelay: delay}
}

func names(vs []BootVM) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}

func TestPlanBoot(t *testing.T) {
	t.Parallel()
	running := stopped("up", true, 0, 0)
	running.Phase, running.PID = vm.PhaseRunning, 7
	external := vm.Entry{Name: "ext", UID: "uid-ext", Class: vm.ClassExternal, Autostart: true}
	unreadable := vm.Entry{UID: "uid-bad", Class: vm.ClassUnreadable, Autostart: true}
	missing := stopped("gone", false, 0, 0)
	missing.Class = vm.ClassMissing
	entries := []vm.Entry{
		stopped("web", true, 2, 0), stopped("DB", true, 1, 0), stopped("cache", true, 1, 5*time.Second),
		stopped("idle", false, 0, 0), running, external, unreadable, missing, stopped("zeta", false, 3, 0),
	}
	for _, tc := range []struct {
		name    string
		restore map[string]string
		want    []string
	}{
		{"autostart: by order, then name regardless of case", nil, []string{"up", "cache", "DB", "web"}},
		{"restore adds the VMs that ran, in the same order", map[string]string{"uid-zeta": WhyRestore, "uid-gone": WhyRestore, "uid-ext": WhyRestore}, []string{"gone", "up", "cache", "DB", "web", "zeta"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := planBoot(entries, tc.restore)
			if got := names(plan); !slices.Equal(got, tc.want) {
				t.Errorf("plan %v; want %v (never EXTERNAL or UNREADABLE ones)", got, tc.want)
			}
			for _, v := range plan {
				want := WhyAutostart
				if tc.restore[v.UID] != "" && v.Name != "up" {
					want = WhyRestore
				}
				if v.Why != want {
					t.Errorf("%s: why %q; want %q", v.Name, v.Why, want)
				}
			}
		})
	}
}

func TestBootStartsInOrderWithDelays(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	writePolicy(t, h, "startDelay: 2s\n")
	running := stopped("up", true, 0, 0)
	running.Phase, running.PID = vm.PhaseRunning, 7
	vms := &fakeVMs{entries: []vm.Entry{stopped("web", true, 2, 0), stopped("db", true, 1, 5*time.Second), stopped("cache", true, 1, 0), stopped("idle", false, 0, 0), running}}
	nw := &fakeNet{steps: []string{"create bridge br0"}}
	var sl sleeps
	rec, err := h.boot(context.Background(), BootOptions{Sleep: sl.sleep}, vms, nw)
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	if want := []string{"uid-cache", "uid-db", "uid-web"}; !slices.Equal(vms.started, want) {
		t.Errorf("started %v; want %v (order, then name; the running one and idle left alone)", vms.started, want)
	}
	// cache first: no startDelay before the first start; db: its own 5s
	// and the policy's 2s; web: the policy's 2s
	if want := []time.Duration{0, 7 * time.Second, 2 * time.Second}; !slices.Equal(sl.d, want) {
		t.Errorf("waits %v; want %v", sl.d, want)
	}
	outcomes := map[string]string{}
	for _, v := range rec.VMs {
		outcomes[v.Name] = v.Outcome
		if v.Outcome == BootStarted && v.StartedAt == nil {
			t.Errorf("%s: started, but no start time", v.Name)
		}
	}
	want := map[string]string{"up": BootAlreadyRunning, "cache": BootStarted, "db": BootStarted, "web": BootStarted}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Errorf("outcomes %v; want %v", outcomes, want)
	}
	if rec.Network.Result != NetApplied || !slices.Equal(rec.Network.Steps, []string{"create bridge br0"}) {
		t.Errorf("network %+v; want applied with its step", rec.Network)
	}
	if tl := rec.Tally(); tl.Wanted != 4 || tl.Started != 3 || tl.AlreadyRunning != 1 || tl.Failed != 0 {
		t.Errorf("tally %+v", tl)
	}
	// the record on disk is the one returned
	disk, err := LoadBootRecord(h.Layout)
	if err != nil || disk == nil {
		t.Fatalf("LoadBootRecord: %v, %v", disk, err)
	}
	if !slices.Equal(names(disk.VMs), names(rec.VMs)) || disk.BootID != proc.BootID() || !disk.FirstOfBoot || disk.Policy.Delay() != 2*time.Second {
		t.Errorf("record on disk %+v; want the returned one", disk)
	}
	if st, err := os.Stat(BootRecordFile(h.Layout)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("boot.json: %v, %v; want mode 0600", st, err)
	}

	// again: nothing changes, nothing waits
	sl.d = nil
	rec2, err := h.boot(context.Background(), BootOptions{Sleep: sl.sleep}, vms, nw)
	if err != nil {
		t.Fatal(err)
	}
	if len(vms.started) != 3 || len(sl.d) != 0 {
		t.Errorf("second boot started %v, waited %v; want nothing more", vms.started[3:], sl.d)
	}
	if tl := rec2.Tally(); tl.AlreadyRunning != 4 || tl.Started != 0 || rec2.Network.Result != NetUnchanged || rec2.FirstOfBoot {
		t.Errorf("second boot: tally %+v, network %s, first %v; want all running, unchanged, not first", tl, rec2.Network.Result, rec2.FirstOfBoot)
	}
}

// A VM that does not start is reported and the rest go on.
func TestBootGoesOnPastAFailure(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	vms := &fakeVMs{
		entries: []vm.Entry{stopped("a", true, 0, 0), stopped("b", true, 0, 0), stopped("c", true, 0, 0)},
		fail:    map[string]error{"uid-b": errors.New(`vm "b": start: qemu exited: boom`)},
	}
	var sl sleeps
	rec, err := h.boot(context.Background(), BootOptions{Sleep: sl.sleep}, vms, &fakeNet{})
	var be *BootError
	if !errors.As(err, &be) || len(be.VMs) != 1 || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("boot = %v; want a BootError with b's failure", err)
	}
	if !slices.Equal(vms.started, []string{"uid-a", "uid-b", "uid-c"}) {
		t.Errorf("started %v; want all three tried", vms.started)
	}
	tl := rec.Tally()
	if tl.Started != 2 || tl.Failed != 1 || tl.FirstFailed == nil || tl.FirstFailed.Name != "b" || !strings.Contains(tl.FirstFailed.Error, "boom") {
		t.Errorf("tally %+v", tl)
	}
	if errors.Is(err, fielderr.ErrInvalid) {
		t.Error("a failed start reads as bad input")
	}
}

// A host.yaml that does not admit: the network is still brought up, no VM
// is started (not even an autostart one), the record says why, and the
// error is bad input naming the field and value.
func TestBootBrokenPolicy(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	writePolicy(t, h, "onBoot: always\n")
	vms := &fakeVMs{entries: []vm.Entry{stopped("a", true, 0, 0)}}
	nw := &fakeNet{steps: []string{"create bridge br0"}, resolved: &netcfg.ResolvedTry{ID: "t1", Why: "it began before the host last booted"}}
	rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, nw)
	if !errors.Is(err, fielderr.ErrInvalid) || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), `onBoot: must be autostart or restore (got "always")`) {
		t.Fatalf("boot = %v; want the policy refused by field and value", err)
	}
	if nw.reapplied != 1 || rec.Network.Result != NetApplied || rec.Network.RolledBack == nil {
		t.Errorf("network: reapplied %d times, %+v; want the try rolled back and the network applied", nw.reapplied, rec.Network)
	}
	if len(vms.started) != 0 || len(rec.VMs) != 0 {
		t.Errorf("started %v (record %v); want no VM at all", vms.started, rec.VMs)
	}
	disk, _ := LoadBootRecord(h.Layout)
	if disk == nil || !strings.Contains(disk.PolicyError, "onBoot") || disk.Policy != nil || disk.VMsError == "" {
		t.Errorf("record %+v; want the policy error and why no VM started", disk)
	}
}

func TestBootNetwork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		nw      *fakeNet
		result  string
		applied int
		fails   bool
	}{
		{"nothing ever applied", &fakeNet{none: true}, NetNone, 1, false},
		{"a try of this boot on trial is left to it", &fakeNet{pending: &netcfg.Pending{ID: "t2", Deadline: time.Now().Add(time.Minute)}}, NetOnTrial, 0, false},
		{"a failed apply", &fakeNet{applyErr: errors.New("netlink: no such device")}, NetFailed, 1, true},
		{"a failed rollback", &fakeNet{resolveErr: errors.New("roll back expired network try t3: boom")}, NetFailed, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := testHost(t)
			vms := &fakeVMs{entries: []vm.Entry{stopped("a", true, 0, 0)}}
			rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, tc.nw)
			var be *BootError
			if got := errors.As(err, &be) && be.Network != nil; got != tc.fails {
				t.Errorf("boot = %v; want a network error %v", err, tc.fails)
			}
			if rec.Network.Result != tc.result || tc.nw.reapplied != tc.applied {
				t.Errorf("network %+v, reapplied %d; want %s, %d", rec.Network, tc.nw.reapplied, tc.result, tc.applied)
			}
			// the VMs start whatever became of the network
			if len(vms.started) != 1 {
				t.Errorf("started %v; want the autostart VM", vms.started)
			}
		})
	}
}

// onBoot: restore starts the VMs of the shutdown record and the autostart
// ones; a record is acted on once.
func TestBootRestore(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	writePolicy(t, h, "onBoot: restore\n")
	vms := &fakeVMs{entries: []vm.Entry{stopped("auto", true, 0, 0), stopped("ran", false, 0, 0), stopped("off", false, 0, 0)}}
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	if err := WriteShutdownRecord(h.Layout, &ShutdownRecord{Time: at, OnShutdown: OnShutdownShutdown, Running: []string{"UID-RAN", "uid-deleted-since"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vms.started, []string{"uid-auto", "uid-ran"}) {
		t.Errorf("started %v; want auto and ran", vms.started)
	}
	if rec.Shutdown == nil || !rec.Shutdown.Used || !rec.Shutdown.Time.Equal(at) || rec.Shutdown.Running != 2 || rec.ShutdownActedOn == nil {
		t.Errorf("shutdown %+v (acted on %v); want the record used", rec.Shutdown, rec.ShutdownActedOn)
	}
	for _, v := range rec.VMs {
		if v.Name == "ran" && v.Why != WhyRestore {
			t.Errorf("ran: why %q; want restore", v.Why)
		}
	}

	// the host goes down uncleanly (no new record) and boots again: the
	// old record restores nothing, even after a run of another boot
	vms.entries = []vm.Entry{stopped("auto", true, 0, 0), stopped("ran", false, 0, 0), stopped("off", false, 0, 0)}
	vms.started = nil
	prev, _ := LoadBootRecord(h.Layout)
	prev.BootID = "an-earlier-boot"
	if err := writeBootRecord(h.Layout, prev); err != nil {
		t.Fatal(err)
	}
	rec, err = h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vms.started, []string{"uid-auto"}) || rec.Shutdown.Used || rec.Shutdown.Note == "" {
		t.Errorf("after an unclean shutdown: started %v, shutdown %+v; want auto alone and a note", vms.started, rec.Shutdown)
	}
}

// A broken policy acts on no shutdown record: once it is fixed, the next
// run restores from it.
func TestBootRestoreAfterPolicyFixed(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	writePolicy(t, h, "onBoot: restore\nstartDelay: forever\n")
	vms := &fakeVMs{entries: []vm.Entry{stopped("ran", false, 0, 0)}}
	if err := WriteShutdownRecord(h.Layout, &ShutdownRecord{Time: time.Now().UTC(), Running: []string{"uid-ran"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{}); err == nil || len(vms.started) != 0 {
		t.Fatalf("broken policy: %v, started %v; want an error and nothing started", err, vms.started)
	}
	writePolicy(t, h, "onBoot: restore\n")
	if _, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{}); err != nil || !slices.Equal(vms.started, []string{"uid-ran"}) {
		t.Errorf("fixed policy: %v, started %v; want ran restored", err, vms.started)
	}
}

// In the first run of a boot, a VM the reboot took down and the policy
// does not start is marked stopped (not a saved one); later runs leave
// MISSING VMs alone.
func TestBootMarksStopped(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	gone := stopped("gone", false, 0, 0)
	gone.Class = vm.ClassMissing
	saved := stopped("saved", false, 0, 0)
	saved.Class, saved.Phase = vm.ClassMissing, vm.PhaseSaved
	auto := stopped("auto", true, 0, 0)
	auto.Class = vm.ClassMissing
	vms := &fakeVMs{entries: []vm.Entry{gone, saved, auto}}
	rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vms.marked, []string{"uid-gone"}) || !slices.Equal(vms.started, []string{"uid-auto"}) {
		t.Errorf("marked %v, started %v; want gone marked, auto started, saved untouched", vms.marked, vms.started)
	}
	if tl := rec.Tally(); tl.MarkedStopped != 1 || tl.Wanted != 1 {
		t.Errorf("tally %+v", tl)
	}
	// a later run of the same boot: a VM MISSING now crashed in this boot
	vms.entries[0].Class = vm.ClassMissing
	vms.marked = nil
	if _, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{}); err != nil {
		t.Fatal(err)
	}
	if len(vms.marked) != 0 {
		t.Errorf("a second run marked %v stopped", vms.marked)
	}
}

// A store that cannot be listed starts nothing; a cancelled boot says
// which VMs did not get their turn.
func TestBootFailsClosed(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	vms := &fakeVMs{listErr: errors.New("vm store: permission denied")}
	rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
	var be *BootError
	if !errors.As(err, &be) || be.List == nil || len(vms.started) != 0 || rec.VMsError == "" {
		t.Errorf("unlistable store: %v, started %v, record %q", err, vms.started, rec.VMsError)
	}

	ctx, cancel := context.WithCancel(context.Background())
	vms = &fakeVMs{entries: []vm.Entry{stopped("a", true, 0, 0), stopped("b", true, 1, time.Hour)}}
	sleepThenCancel := func(ctx context.Context, d time.Duration) error {
		if d > 0 {
			cancel()
		}
		return ctx.Err()
	}
	rec, err = h.boot(ctx, BootOptions{Sleep: sleepThenCancel}, vms, &fakeNet{})
	if !errors.Is(err, context.Canceled) || !slices.Equal(vms.started, []string{"uid-a"}) {
		t.Errorf("cancelled: %v, started %v; want a started, then cancelled", err, vms.started)
	}
	if tl := rec.Tally(); tl.NotStarted != 1 {
		t.Errorf("tally %+v; want b not started", tl)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	st := h.Status()
	if st.Policy == nil || st.Policy.OnBoot != OnBootAutostart || st.Boot != nil || st.Shutdown != nil || st.PolicyError != "" {
		t.Errorf("a fresh host: %+v; want the default policy and no records", st)
	}
	if _, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, &fakeVMs{}, &fakeNet{}); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, h, "parallelShutdown: lots\n")
	if err := os.WriteFile(ShutdownRecordFile(h.Layout), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	st = h.Status()
	if st.Policy != nil || !strings.Contains(st.PolicyError, "parallelShutdown") {
		t.Errorf("policy %+v, error %q; want the field named", st.Policy, st.PolicyError)
	}
	if st.Boot == nil || !st.BootOfThisBoot {
		t.Errorf("boot %+v of this boot %v; want the record of this boot", st.Boot, st.BootOfThisBoot)
	}
	if st.Shutdown != nil || !strings.Contains(st.ShutdownError, "damaged") {
		t.Errorf("shutdown %+v, error %q; want it damaged", st.Shutdown, st.ShutdownError)
	}
}

// A shutdown that saved its guests has them resumed whatever onBoot says.
func TestBootResumesSaved(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	saved := stopped("saved", false, 0, 0)
	saved.Phase = vm.PhaseSaved
	vms := &fakeVMs{entries: []vm.Entry{saved, stopped("off", false, 0, 0)}}
	if err := WriteShutdownRecord(h.Layout, &ShutdownRecord{Time: time.Now().UTC(), OnShutdown: OnShutdownSave, Running: []string{"uid-saved"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vms.started, []string{"uid-saved"}) || len(rec.VMs) != 1 || rec.VMs[0].Why != WhySaved {
		t.Errorf("started %v, record %+v; want the saved VM resumed, why saved", vms.started, rec.VMs)
	}
}

// A shutdown record older than a VM's last start is stale (a
// shutdown-guests by hand, or a reboot that never went down, and the host
// ran on): it restores nothing, and the record says why. Saved VMs are
// resumed all the same: their state waits on disk.
func TestBootStaleShutdownRecord(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, policy, mode string
		later              time.Time // the "later" VM's last start
		want               []string
		stale              bool
	}{
		{"restore, a VM started after it", "onBoot: restore\n", OnShutdownShutdown, at.Add(3 * time.Hour), []string{"uid-sv"}, true},
		{"a save's, a VM started after it", "", OnShutdownSave, at.Add(3 * time.Hour), []string{"uid-sv"}, true},
		{"restore, every start before it", "onBoot: restore\n", OnShutdownShutdown, at.Add(-time.Hour), []string{"uid-ran", "uid-sv"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := testHost(t)
			writePolicy(t, h, tc.policy)
			ran := stopped("ran", false, 0, 0)
			ran.StartedAt = at.Add(-2 * time.Hour)
			later := stopped("later", false, 0, 0)
			later.Class, later.StartedAt, later.SpecRunning = vm.ClassMissing, tc.later, true
			sv := stopped("sv", false, 0, 0)
			sv.Phase, sv.SpecRunning, sv.StartedAt = vm.PhaseSaved, true, at.Add(-time.Hour)
			vms := &fakeVMs{entries: []vm.Entry{ran, later, sv}}
			if err := WriteShutdownRecord(h.Layout, &ShutdownRecord{Time: at, OnShutdown: tc.mode, Running: []string{"uid-ran"}}); err != nil {
				t.Fatal(err)
			}
			rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(vms.started, tc.want) {
				t.Errorf("started %v; want %v", vms.started, tc.want)
			}
			gotStale := rec.Shutdown != nil && strings.Contains(rec.Shutdown.Note, "stale") && strings.Contains(rec.Shutdown.Note, `"later"`)
			if gotStale != tc.stale || (tc.stale && rec.Shutdown.Used) {
				t.Errorf("shutdown %+v; want stale %v (naming the VM started after it), not used when stale", rec.Shutdown, tc.stale)
			}
			for _, v := range rec.VMs {
				if v.Name == "sv" && (v.Why != WhySaved || v.Outcome != BootStarted) {
					t.Errorf("sv: %+v; want resumed, why saved", v)
				}
			}
		})
	}
}

// A Saved VM is resumed without any shutdown record, unless it was
// stopped since (spec.running false: its state stays for a later start).
func TestBootResumesSavedWithoutRecord(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	sv := stopped("sv", false, 0, 0)
	sv.Phase, sv.SpecRunning = vm.PhaseSaved, true
	off := stopped("off", false, 0, 0)
	off.Phase = vm.PhaseSaved
	vms := &fakeVMs{entries: []vm.Entry{sv, off}}
	rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vms.started, []string{"uid-sv"}) || len(vms.marked) != 0 {
		t.Errorf("started %v, marked %v; want sv resumed, off left Saved", vms.started, vms.marked)
	}
	if len(rec.VMs) != 1 || rec.VMs[0].Why != WhySaved {
		t.Errorf("record %+v; want sv, why saved", rec.VMs)
	}
}

// The boot reads each VM again right before its start: what was done to
// it during the delays (autostart turned off, deleted and made anew,
// started and stopped by hand, started by hand) wins over the plan.
func TestBootRechecksBeforeEachStart(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	vms := &fakeVMs{entries: []vm.Entry{stopped("a", true, 0, 0), stopped("b", true, 1, time.Second), stopped("c", true, 2, 0),
		stopped("d", true, 3, 0), stopped("e", true, 4, 0), stopped("f", true, 5, 0)}}
	operator := func(ctx context.Context, d time.Duration) error {
		if d == 0 {
			return ctx.Err()
		}
		vms.mu.Lock()
		defer vms.mu.Unlock()
		if len(vms.started) == 1 && len(vms.entries) == 6 {
			vms.entries[1].Autostart = false                                                     // b: virt vm autostart b off
			vms.entries[2] = stopped("c", true, 2, 0)                                            // c: deleted, and made anew
			vms.entries[2].UID = "uid-c-new"                                                     //
			vms.entries[3].StartedAt = time.Now().UTC()                                          // d: started and stopped by hand
			vms.entries[4].Phase, vms.entries[4].PID = vm.PhaseRunning, 4242                     // e: started by hand
			vms.entries[5].Class, vms.entries[5].Message = vm.ClassUnreadable, "spec unreadable" // f: its spec broke
		}
		return ctx.Err()
	}
	rec, err := h.boot(context.Background(), BootOptions{Sleep: operator}, vms, &fakeNet{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vms.started, []string{"uid-a"}) {
		t.Errorf("started %v; want a alone", vms.started)
	}
	want := map[string]string{"a": BootStarted, "b": BootNotStarted, "c": BootNotStarted, "d": BootNotStarted, "e": BootAlreadyRunning, "f": BootNotStarted}
	for _, v := range rec.VMs {
		if v.Outcome != want[v.Name] {
			t.Errorf("%s: outcome %s; want %s", v.Name, v.Outcome, want[v.Name])
		}
		if v.Outcome == BootNotStarted && v.Note == "" {
			t.Errorf("%s: not started, with no note why", v.Name)
		}
	}
	if len(rec.VMs) != len(want) {
		t.Errorf("record %v; want the six planned", names(rec.VMs))
	}
}

// A boot record that cannot be read fails closed: the run counts as a
// later one of this boot, acts on no shutdown record, marks no VM stopped,
// and says so. A shutdown record that cannot be read, with onBoot:
// restore, marks no VM stopped either: the MISSING VMs are what is left of
// which VMs ran.
func TestBootUnreadableRecordsFailClosed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, policy      string
		badBoot, badShut  bool
		wantStarted       []string
		wantMarked        []string
		wantFirst         bool
		wantPreviousError bool
	}{
		{"boot.json damaged", "onBoot: restore\n", true, false, []string{"uid-auto"}, nil, false, true},
		{"shutdown.json damaged, restore", "onBoot: restore\n", false, true, []string{"uid-auto"}, nil, true, false},
		{"shutdown.json damaged, autostart", "", false, true, []string{"uid-auto"}, []string{"uid-gone"}, true, false},
		{"both readable", "onBoot: restore\n", false, false, []string{"uid-auto", "uid-ran"}, []string{"uid-gone"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := testHost(t)
			writePolicy(t, h, tc.policy)
			gone := stopped("gone", false, 0, 0)
			gone.Class = vm.ClassMissing
			vms := &fakeVMs{entries: []vm.Entry{stopped("auto", true, 0, 0), stopped("ran", false, 0, 0), gone}}
			if err := WriteShutdownRecord(h.Layout, &ShutdownRecord{Time: time.Now().UTC(), OnShutdown: OnShutdownShutdown, Running: []string{"uid-ran"}}); err != nil {
				t.Fatal(err)
			}
			for file, bad := range map[string]bool{BootRecordFile(h.Layout): tc.badBoot, ShutdownRecordFile(h.Layout): tc.badShut} {
				if bad {
					if err := os.WriteFile(file, []byte(`{"time": `), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(vms.started, tc.wantStarted) || !slices.Equal(vms.marked, tc.wantMarked) {
				t.Errorf("started %v, marked %v; want %v, %v", vms.started, vms.marked, tc.wantStarted, tc.wantMarked)
			}
			if rec.FirstOfBoot != tc.wantFirst || (rec.PreviousError != "") != tc.wantPreviousError {
				t.Errorf("first %v, previous error %q; want first %v, an error %v", rec.FirstOfBoot, rec.PreviousError, tc.wantFirst, tc.wantPreviousError)
			}
			if tc.badBoot && (rec.Shutdown == nil || rec.Shutdown.Used || rec.Shutdown.Note == "" || rec.ShutdownActedOn != nil) {
				t.Errorf("shutdown %+v, acted on %v; want it not used, a note why, and not acted on", rec.Shutdown, rec.ShutdownActedOn)
			}
		})
	}
}

// Only a shutdown record that was used is acted on: one the boot passed
// over (onBoot: autostart, a shutdown's record) stays for a boot whose
// policy restores.
func TestBootActsOnlyOnAUsedRecord(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	vms := &fakeVMs{entries: []vm.Entry{stopped("ran", false, 0, 0)}}
	at := time.Now().UTC()
	if err := WriteShutdownRecord(h.Layout, &ShutdownRecord{Time: at, OnShutdown: OnShutdownShutdown, Running: []string{"uid-ran"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ShutdownActedOn != nil || rec.Shutdown.Used || len(vms.started) != 0 {
		t.Errorf("onBoot autostart: acted on %v, shutdown %+v, started %v; want it passed over", rec.ShutdownActedOn, rec.Shutdown, vms.started)
	}
	writePolicy(t, h, "onBoot: restore\n")
	rec, err = h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ShutdownActedOn == nil || !rec.ShutdownActedOn.Equal(at) || !slices.Equal(vms.started, []string{"uid-ran"}) {
		t.Errorf("onBoot restore: acted on %v, started %v; want the record used", rec.ShutdownActedOn, vms.started)
	}
}

// A shutdown that begins during the boot (its "shutting down" marker)
// ends the starts: the VM whose delay it cuts and those after it are
// not-started, saying the host is shutting down. One set before the boot
// begins starts nothing; one of an earlier boot is removed and ignored.
func TestBootStopsWhenTheHostShutsDown(t *testing.T) {
	t.Parallel()
	if proc.BootID() == "" {
		t.Skip("no boot id readable here (/proc/sys/kernel/random/boot_id)")
	}
	plan := func() *fakeVMs {
		return &fakeVMs{entries: []vm.Entry{stopped("a", true, 0, 0), stopped("b", true, 1, time.Hour), stopped("c", true, 2, 0)}}
	}
	wantDown := func(t *testing.T, rec *BootRecord, names ...string) {
		t.Helper()
		for _, v := range rec.VMs {
			if slices.Contains(names, v.Name) && (v.Outcome != BootNotStarted || !strings.Contains(v.Note, "the host is shutting down")) {
				t.Errorf("%s: %s (%q); want not-started, the host shutting down", v.Name, v.Outcome, v.Note)
			}
		}
	}

	t.Run("during a delay", func(t *testing.T) {
		t.Parallel()
		h := testHost(t)
		vms := plan()
		shutdownBegins := func(ctx context.Context, d time.Duration) error {
			if d == 0 {
				return ctx.Err()
			}
			if err := markShuttingDown(h.Layout, time.Now()); err != nil {
				t.Error(err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Second):
				return errors.New("the delay was not cut")
			}
		}
		start := time.Now()
		rec, err := h.boot(context.Background(), BootOptions{Sleep: shutdownBegins}, vms, &fakeNet{})
		if !errors.Is(err, ErrHostShuttingDown) {
			t.Errorf("boot = %v; want the host shutting down", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("took %v; want the delay cut at once", took)
		}
		if !slices.Equal(vms.started, []string{"uid-a"}) {
			t.Errorf("started %v; want a alone", vms.started)
		}
		wantDown(t, rec, "b", "c")
	})
	t.Run("before the boot", func(t *testing.T) {
		t.Parallel()
		h := testHost(t)
		if err := markShuttingDown(h.Layout, time.Now()); err != nil {
			t.Fatal(err)
		}
		vms := plan()
		rec, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{})
		if !errors.Is(err, ErrHostShuttingDown) || len(vms.started) != 0 {
			t.Errorf("boot = %v, started %v; want none started, the host shutting down", err, vms.started)
		}
		wantDown(t, rec, "a", "b", "c")
	})
	t.Run("an earlier boot's", func(t *testing.T) {
		t.Parallel()
		h := testHost(t)
		if err := writeRecord(ShuttingDownFile(h.Layout), &ShuttingDown{Time: time.Now(), BootID: "an-earlier-boot"}); err != nil {
			t.Fatal(err)
		}
		vms := plan()
		if _, err := h.boot(context.Background(), BootOptions{Sleep: (&sleeps{}).sleep}, vms, &fakeNet{}); err != nil || len(vms.started) != 3 {
			t.Errorf("boot = %v, started %v; want all three", err, vms.started)
		}
		if _, err := os.Stat(ShuttingDownFile(h.Layout)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the earlier boot's marker: %v; want it removed", err)
		}
	})
}
