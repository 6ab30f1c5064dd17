package netcfg

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

// resolveTestFakeWatchdog starts a process that passes for the watchdog
// of try id (its ID in the environment, as wdStart gives it) and returns
// its PID and start time; it is killed at the end of the test.
func resolveTestFakeWatchdog(t *testing.T, id string) (int, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.Env = []string{wdIDEnv + "=" + id}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st, err := proc.ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st.Start
}

// resolveTestDeadProcess returns the PID of a process that has exited
// and was reaped, and one that has exited and was not (a zombie).
func resolveTestDeadProcess(t *testing.T, id string) (reaped, zombie int) {
	t.Helper()
	var pids []int
	for _, wait := range []bool{true, false} {
		cmd := exec.Command("sleep", "300")
		cmd.Env = []string{wdIDEnv + "=" + id}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Process.Kill()
		if wait {
			_ = cmd.Wait()
		} else {
			t.Cleanup(func() { _ = cmd.Wait() })
			for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if st, err := proc.ReadStat(cmd.Process.Pid); err == nil && st.State == 'Z' {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the killed process did not become a zombie")
				}
			}
		}
		pids = append(pids, cmd.Process.Pid)
	}
	return pids[0], pids[1]
}

func TestWatchdogLiveness(t *testing.T) {
	const id = "0123456789abcdef"
	pid, start := resolveTestFakeWatchdog(t, id)
	reaped, zombie := resolveTestDeadProcess(t, id)
	boot := proc.BootID()
	if boot == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id")
	}
	tests := []struct {
		name    string
		p       Pending
		want    wdLiveness
		wantWhy string
	}{
		{"alive", Pending{ID: id, WatchdogPID: pid, WatchdogStart: start, BootID: boot}, wdAlive, ""},
		{"alive, start time not recorded", Pending{ID: id, WatchdogPID: pid}, wdAlive, ""},
		{"no watchdog", Pending{ID: id}, wdDead, "it has no watchdog"},
		{"earlier boot", Pending{ID: id, WatchdogPID: pid, WatchdogStart: start, BootID: "another-boot"}, wdDead, "before the host last booted"},
		{"exited", Pending{ID: id, WatchdogPID: reaped, BootID: boot}, wdDead, "has exited"},
		{"zombie", Pending{ID: id, WatchdogPID: zombie, BootID: boot}, wdDead, "has exited"},
		// a reused PID: started at another time, or without the try's ID
		{"pid reused, other start time", Pending{ID: id, WatchdogPID: pid, WatchdogStart: start + 1, BootID: boot}, wdDead, "is another process now"},
		{"pid reused, other process", Pending{ID: id, WatchdogPID: os.Getpid(), BootID: boot}, wdDead, "is another process now"},
		{"watchdog of another try", Pending{ID: "fedcba9876543210", WatchdogPID: pid, BootID: boot}, wdDead, "is another process now"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := tt.p.watchdogLiveness()
			if got != tt.want || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("watchdogLiveness = %v, %q; want %v, %q", got, why, tt.want, tt.wantWhy)
			}
			if tt.p.WatchdogRunning() != (tt.want == wdAlive) {
				t.Errorf("WatchdogRunning = %t; want %t", !(tt.want == wdAlive), tt.want == wdAlive)
			}
		})
	}
}

// resolveTestRecord writes a pending record under layout, as a try that
// had applied.yaml hold before.
func resolveTestRecord(t *testing.T, layout paths.Layout, p *Pending, before string) {
	t.Helper()
	root, err := filepath.Abs(layout.Root)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID == "" {
		p.ID = "0123456789abcdef"
	}
	p.Root, p.Snapshot, p.Applied = root, &Snapshot{}, []byte(before)
	if p.Started.IsZero() {
		p.Started = p.Deadline.Add(-time.Minute)
	}
	if err := tryWrite(PendingPath(layout), p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(AppliedFile(layout), []byte("# the trial\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestResolveExpiredTry(t *testing.T) {
	const before = "# before the try\n"
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Minute)
	tests := []struct {
		name string
		// rec makes the record; live is the fake watchdog's PID and start
		rec     func(live int, start uint64) *Pending
		resolve bool
		wantWhy string
	}{
		{"expired, watchdog exited", func(int, uint64) *Pending {
			return &Pending{Deadline: past, WatchdogPID: 0x3fffff, BootID: proc.BootID()}
		}, true, "has exited"},
		// a failed rollback is retried by `virt net rollback` only, never
		// by whoever looks at the network (each look would redo it)
		{"expired, watchdog's rollback failed and it gave up", func(int, uint64) *Pending {
			return &Pending{Deadline: past, BootID: proc.BootID(), RollbackError: "restore: boom"}
		}, false, ""},
		{"from an earlier boot, its rollback failed", func(int, uint64) *Pending {
			return &Pending{Deadline: past, BootID: "another-boot", RollbackError: "restore: boom"}
		}, false, ""},
		{"expired, no watchdog", func(int, uint64) *Pending {
			return &Pending{Deadline: past, BootID: proc.BootID()}
		}, true, "has no watchdog"},
		{"from an earlier boot, before its deadline", func(live int, start uint64) *Pending {
			return &Pending{Deadline: future, WatchdogPID: live, WatchdogStart: start, BootID: "another-boot"}
		}, true, "before the host last booted"},
		{"expired, pid reused", func(live int, start uint64) *Pending {
			return &Pending{ID: "fedcba9876543210", Deadline: past, WatchdogPID: live, WatchdogStart: start, BootID: proc.BootID()}
		}, true, "another process now"},
		// never pre-empt a live watchdog: it rolls back itself
		{"expired, watchdog alive", func(live int, start uint64) *Pending {
			return &Pending{Deadline: past, WatchdogPID: live, WatchdogStart: start, BootID: proc.BootID()}
		}, false, ""},
		// a try within its deadline can still be confirmed, watchdog or not
		{"not expired, watchdog exited", func(int, uint64) *Pending {
			return &Pending{Deadline: future, WatchdogPID: 0x3fffff, BootID: proc.BootID()}
		}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			live, start := resolveTestFakeWatchdog(t, "0123456789abcdef")
			resolveTestRecord(t, layout, tt.rec(live, start), before)
			r, err := ResolveExpiredTry(context.Background(), testutil.Logger(t), layout)
			if err != nil {
				t.Fatalf("ResolveExpiredTry: %v", err)
			}
			applied, _ := os.ReadFile(AppliedFile(layout))
			_, perr := PendingTry(layout)
			if !tt.resolve {
				if r != nil || perr != nil || string(applied) != "# the trial\n" {
					t.Errorf("got %+v, record %v, applied.yaml %q; want nothing done", r, perr, applied)
				}
				return
			}
			if r == nil || !strings.Contains(r.Why, tt.wantWhy) || r.At.IsZero() {
				t.Fatalf("got %+v; want the try rolled back, saying %q", r, tt.wantWhy)
			}
			if !errors.Is(perr, ErrNoPendingTry) || string(applied) != before {
				t.Errorf("after the rollback: record %v, applied.yaml %q; want no record and %q", perr, applied, before)
			}
			if r, err := ResolveExpiredTry(context.Background(), nil, layout); r != nil || err != nil {
				t.Errorf("second ResolveExpiredTry = %+v, %v; want nothing to do", r, err)
			}
		})
	}
}

// Two callers noticing the same expired try at once: one rolls back, the
// others find it gone.
func TestResolveExpiredTryOnce(t *testing.T) {
	layout := paths.New(t.TempDir())
	resolveTestRecord(t, layout, &Pending{Deadline: time.Now().Add(-time.Second)}, "# before\n")
	const n = 8
	var wg sync.WaitGroup
	results := make([]*ResolvedTry, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = ResolveExpiredTry(context.Background(), nil, layout)
		})
	}
	close(start)
	wg.Wait()
	resolved := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("caller %d: %v", i, errs[i])
		}
		if results[i] != nil {
			resolved++
		}
	}
	if resolved != 1 {
		t.Errorf("%d callers rolled the try back; want exactly 1", resolved)
	}
}

// A rollback that fails is recorded, and not redone by the next look at
// the network (each `virt net` command, each status refresh of the DCUI
// every 5 s would restore links and stop and start DHCP clients again):
// only `virt net rollback` retries it.
func TestResolveExpiredTryFailedRollbackNotRetried(t *testing.T) {
	layout := paths.New(t.TempDir())
	p := &Pending{Deadline: time.Now().Add(-time.Second), BootID: proc.BootID()}
	resolveTestRecord(t, layout, p, "")
	p.Applied = nil // the rollback removes applied.yaml ...
	if err := tryWrite(PendingPath(layout), p); err != nil {
		t.Fatal(err)
	}
	// ... which it cannot: a directory that is not empty
	applied := AppliedFile(layout)
	if err := os.Remove(applied); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(applied, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	var logs resolveTestLogs
	log := slog.New(slog.NewTextHandler(&logs, nil))
	r, err := ResolveExpiredTry(context.Background(), log, layout)
	if r == nil || err == nil {
		t.Fatalf("first ResolveExpiredTry = %+v, %v; want the try and the failed rollback's error", r, err)
	}
	cur, err := PendingTry(layout)
	if err != nil || cur.RollbackError == "" {
		t.Fatalf("record after the failed rollback: %+v, %v; want it kept with RollbackError", cur, err)
	}
	attempts := logs.count("rolling back")
	for i := range 3 {
		if r, err := ResolveExpiredTry(context.Background(), log, layout); r != nil || err != nil {
			t.Errorf("look %d after the failed rollback: ResolveExpiredTry = %+v, %v; want nothing done", i+2, r, err)
		}
	}
	if n := logs.count("rolling back"); n != attempts {
		t.Errorf("the rollback ran %d more times after it failed; want none:\n%s", n-attempts, logs.String())
	}
	if again, err := PendingTry(layout); err != nil || again.RollbackError != cur.RollbackError {
		t.Errorf("record now %+v, %v; want it as the failed rollback left it", again, err)
	}
	// the explicit retry still runs, and succeeds once the cause is gone
	if err := os.RemoveAll(applied); err != nil {
		t.Fatal(err)
	}
	if err := Rollback(context.Background(), layout); err != nil {
		t.Fatalf("virt net rollback after the cause is fixed: %v", err)
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry after the explicit rollback: %v; want ErrNoPendingTry", err)
	}
}

// resolveTestLogs collects log lines from any goroutine.
type resolveTestLogs struct{ testutil.Buffer }

func (l *resolveTestLogs) count(s string) int { return strings.Count(l.String(), s) }

// While another process holds the try lock (a `virt net rollback` that
// hangs) or the apply lock, ResolveExpiredTry gives up when its context
// ends, with ErrTryBusy, and touches nothing: a status screen that looks
// every few seconds must not hang behind it.
func TestResolveExpiredTryBusy(t *testing.T) {
	tests := []struct {
		name string
		lock func(paths.Layout) string
	}{
		{"try lock held", func(l paths.Layout) string { return filepath.Join(l.NetworkDir(), "pending.lock") }},
		{"apply lock held", func(l paths.Layout) string { return filepath.Join(l.RunDir(), "locks", "network-apply.lock") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			resolveTestRecord(t, layout, &Pending{Deadline: time.Now().Add(-time.Second), BootID: proc.BootID()}, "# before\n")
			held, err := flock.Acquire(context.Background(), tt.lock(layout))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			type result struct {
				r   *ResolvedTry
				err error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() { r, err := ResolveExpiredTry(ctx, nil, layout); done <- result{r, err} }()
			var got result
			select {
			case got = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ResolveExpiredTry still waits for the lock 5s after its context ended")
			}
			if got.r != nil || !errors.Is(got.err, ErrTryBusy) {
				t.Errorf("ResolveExpiredTry = %+v, %v; want nothing done and ErrTryBusy", got.r, got.err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("ResolveExpiredTry took %v with a 200ms context", took)
			}
			if b, _ := os.ReadFile(AppliedFile(layout)); string(b) != "# the trial\n" {
				t.Errorf("applied.yaml %q; want the trial's, untouched", b)
			}
			if _, err := PendingTry(layout); err != nil {
				t.Errorf("PendingTry: %v; want the try still pending", err)
			}
			// once the holder lets go, the next look rolls it back
			held.Release()
			if r, err := ResolveExpiredTry(context.Background(), nil, layout); r == nil || err != nil {
				t.Errorf("ResolveExpiredTry after the lock is free = %+v, %v; want the try rolled back", r, err)
			}
		})
	}
}

// A record that cannot be read is an error, and nothing is touched.
func TestResolveExpiredTryUnreadable(t *testing.T) {
	layout := paths.New(t.TempDir())
	path := PendingPath(layout)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := ResolveExpiredTry(context.Background(), nil, layout); r != nil || err == nil {
		t.Errorf("ResolveExpiredTry = %+v, %v; want an error", r, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{not json" {
		t.Errorf("record now %q; want it left alone", b)
	}
	if err := CheckNoPendingTry(layout); !errors.Is(err, ErrTryPending) {
		t.Errorf("CheckNoPendingTry with an unreadable record = %v; want ErrTryPending (fail closed)", err)
	}
}

// The case: a try whose watchdog is killed -9. Nothing rolls it
// back at the deadline; the first caller after it does, once.
func TestResolveExpiredTryKilledWatchdog(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	if err := os.MkdirAll(layout.NetworkDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(AppliedFile(layout), []byte("# before\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Try(context.Background(), testutil.Logger(t), layout, tryTestLinks,
		func(context.Context) error { return os.WriteFile(AppliedFile(layout), []byte("# the trial\n"), 0o600) },
		nil, TryMargin)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.WatchdogPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
	if r, err := ResolveExpiredTry(context.Background(), nil, layout); r != nil || err != nil {
		t.Fatalf("before the deadline: ResolveExpiredTry = %+v, %v; want nothing done (it may still be confirmed)", r, err)
	}
	time.Sleep(time.Until(p.Deadline) + 300*time.Millisecond)
	if _, err := PendingTry(layout); err != nil {
		t.Fatalf("after the deadline, with the watchdog killed: %v; want the try still pending", err)
	}
	r, err := ResolveExpiredTry(context.Background(), testutil.Logger(t), layout)
	if err != nil || r == nil || r.ID != p.ID || !strings.Contains(r.Why, "has exited") || len(r.Links) != 1 || r.Links[0] != tryTestLinks[0] {
		t.Fatalf("ResolveExpiredTry = %+v, %v; want try %s rolled back, its watchdog named as exited", r, err, p.ID)
	}
	if b, _ := os.ReadFile(AppliedFile(layout)); string(b) != "# before\n" {
		t.Errorf("applied.yaml %q after the rollback; want it restored", b)
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry after the rollback: %v; want ErrNoPendingTry", err)
	}
}

// While a try is pending every apply is refused before it changes
// anything; a dry run still plans. The try's own apply is allowed.
func TestApplyRefusedDuringTry(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	ctx := context.Background()
	log := testutil.Logger(t)
	// Changes only files under the layout's root (not /): no link, no
	// kernel host name.
	trial := &Config{APIVersion: APIVersion, Kind: Kind, Hostname: "trial"}
	p, err := Try(ctx, log, layout, tryTestLinks, func(ctx context.Context) error {
		_, err := Apply(ctx, log, layout, trial, ApplyOptions{AllowDefaultRouteChange: true})
		return err
	}, nil, 30*time.Second)
	if err != nil {
		t.Fatalf("Try whose apply calls Apply: %v; want the try's own apply allowed", err)
	}
	hostname := filepath.Join(layout.Root, "etc", "hostname")
	if b, _ := os.ReadFile(hostname); string(b) != "trial\n" {
		t.Fatalf("hostname %q after the try's apply; want trial", b)
	}
	plain := &Config{APIVersion: APIVersion, Kind: Kind, Hostname: "plain"}
	applied, _ := os.ReadFile(AppliedFile(layout))
	tests := []struct {
		name string
		do   func() error
	}{
		{"Apply", func() error { _, err := Apply(ctx, log, layout, plain, ApplyOptions{}); return err }},
		{"ApplyDesired", func() error { _, _, err := ApplyDesired(ctx, log, layout, plain, DesiredOptions{}); return err }},
		{"ApplyDesired with a try", func() error {
			_, _, err := ApplyDesired(ctx, log, layout, plain, DesiredOptions{Try: 30 * time.Second})
			return err
		}},
		{"Try", func() error {
			_, err := Try(ctx, log, layout, tryTestLinks, func(context.Context) error { t.Error("second try applied"); return nil }, nil, 30*time.Second)
			return err
		}},
	}
	for _, tc := range tests {
		err := tc.do()
		var tp *TryPendingError
		if !errors.Is(err, ErrTryPending) || !errors.As(err, &tp) || tp.ID != p.ID || !tp.Deadline.Equal(p.Deadline) {
			t.Errorf("%s during a try: %v; want a TryPendingError naming try %s", tc.name, err, p.ID)
		}
		if err != nil && (!strings.Contains(err.Error(), p.ID) || !strings.Contains(err.Error(), p.Deadline.Local().Format(time.RFC3339))) {
			t.Errorf("%s: %q names neither the try nor its deadline", tc.name, err)
		}
	}
	if b, _ := os.ReadFile(hostname); string(b) != "trial\n" {
		t.Errorf("hostname %q; want the trial's, untouched by the refused applies", b)
	}
	if b, _ := os.ReadFile(AppliedFile(layout)); string(b) != string(applied) {
		t.Errorf("applied.yaml changed by a refused apply")
	}
	for _, f := range []string{DesiredFile(layout), DesiredPendingFile(layout)} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s written by a refused apply", f)
		}
	}
	if cur, err := PendingTry(layout); err != nil || cur.ID != p.ID {
		t.Errorf("pending try %+v, %v; want %s, untouched", cur, err, p.ID)
	}
	if res, _, err := ApplyDesired(ctx, log, layout, plain, DesiredOptions{DryRun: true}); err != nil || res == nil {
		t.Errorf("dry run during a try: %v; want a plan", err)
	}
	if err := Rollback(ctx, layout); err != nil {
		t.Fatal(err)
	}
	if err := CheckNoPendingTry(layout); err != nil {
		t.Errorf("CheckNoPendingTry after the rollback: %v", err)
	}
}

// A try of a file the apply would refuse fails validation first: no
// record, no watchdog, no "restored".
func TestApplyDesiredTryValidatesFirst(t *testing.T) {
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	cfg := &Config{APIVersion: APIVersion, Kind: Kind, Bridges: []Bridge{{Name: "vctestbr0", Ports: []string{"vcnosuchport0"}}}}
	_, p, err := ApplyDesired(context.Background(), testutil.Logger(t), layout, cfg, DesiredOptions{Try: 30 * time.Second})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bridges[0].ports[0]") || strings.Contains(err.Error(), "restored") || p != nil {
		t.Fatalf("ApplyDesired --try of a bad file: %v, %v; want ErrInvalid naming bridges[0].ports[0], nothing restored", p, err)
	}
	if _, err := os.Stat(PendingPath(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pending record: %v; want none ever written", err)
	}
	if _, err := os.Stat(filepath.Join(layout.LogDir(), wdLogName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("watchdog log: %v; want no watchdog ever started", err)
	}
}
