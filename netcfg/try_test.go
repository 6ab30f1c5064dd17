package netcfg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

// tryTestLinks names links that do not exist: a try over them snapshots
// and restores nothing, so these tests need no privilege and change
// nothing on the host.
var tryTestLinks = []string{"vctestnone0"}

func TestPendingRecord(t *testing.T) {
	layout := paths.New(t.TempDir())
	path := PendingPath(layout)
	if want := filepath.Join(layout.NetworkDir(), "pending.json"); path != want {
		t.Errorf("PendingPath = %s; want %s", path, want)
	}
	now := time.Now().UTC().Truncate(time.Second)
	p := &Pending{ID: "0123456789abcdef", Started: now, Deadline: now.Add(90 * time.Second), WatchdogPID: 4242,
		BootID: "boot", Snapshot: snapTestSnapshot()}
	if err := tryWrite(path, p); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", st.Mode().Perm())
	}
	got, err := PendingTry(layout)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("read back:\ngot  %+v\nwant %+v", got, p)
	}
	if r := got.Remaining(now.Add(30 * time.Second)); r != 60*time.Second {
		t.Errorf("Remaining = %v; want 1m0s", r)
	}
	if r := got.Remaining(now.Add(time.Hour)); r != 0 {
		t.Errorf("Remaining after the deadline = %v; want 0", r)
	}
	if got.WatchdogRunning() {
		t.Error("WatchdogRunning for another boot's record = true; want false")
	}
}

func TestNoPendingTry(t *testing.T) {
	layout := paths.New(t.TempDir())
	if err := Confirm(context.Background(), layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("Confirm: %v; want ErrNoPendingTry", err)
	}
	if err := Rollback(context.Background(), layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("Rollback: %v; want ErrNoPendingTry", err)
	}
	if p, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) || p != nil {
		t.Errorf("PendingTry: %v, %v; want nil, ErrNoPendingTry", p, err)
	}
}

func TestCheckTryDeadline(t *testing.T) {
	stpCfg := &Config{Bridges: []Bridge{{Name: "vctestnobr0", STP: true}}}
	tests := []struct {
		name     string
		cfg      *Config
		deadline time.Duration
		wantErr  []string // substrings; nil: accepted
		want     DeadlineTooShortError
	}{
		{"no stp, enough", nil, TryMargin, nil, DeadlineTooShortError{}},
		{"no stp, short", nil, time.Second, []string{"a try of 1s", "5s"},
			DeadlineTooShortError{Got: time.Second, Min: 5 * time.Second, Margin: TryMargin}},
		{"new stp bridge, short", stpCfg, 30 * time.Second, []string{"a try of 30s", "STP", "35s", "30s (2 × forward delay)"},
			DeadlineTooShortError{Got: 30 * time.Second, Min: 35 * time.Second, STP: 30 * time.Second, Margin: TryMargin}},
		{"new stp bridge, enough", stpCfg, 35 * time.Second, nil, DeadlineTooShortError{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTryDeadline(tt.cfg, tryTestLinks, tt.deadline)
			if tt.wantErr == nil {
				if err != nil {
					t.Errorf("got %v; want nil", err)
				}
				return
			}
			var dl *DeadlineTooShortError
			if !errors.Is(err, ErrDeadlineTooShort) || !errors.As(err, &dl) {
				t.Fatalf("got %v; want a *DeadlineTooShortError", err)
			}
			if *dl != tt.want {
				t.Errorf("got %+v; want %+v", *dl, tt.want)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			// the flag is the CLI's to name
			if strings.Contains(err.Error(), "--try") {
				t.Errorf("error %q names a CLI flag", err)
			}
		})
	}
}

func TestTryApplyFailureStandsDown(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	boom := errors.New("boom")
	verified := false
	_, err := Try(context.Background(), testutil.Logger(t), layout, tryTestLinks,
		func(context.Context) error { return boom },
		func(context.Context) error { verified = true; return nil },
		10*time.Second)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "restored") {
		t.Fatalf("Try: %v; want the apply error, saying the state was restored", err)
	}
	if verified {
		t.Error("verify ran after a failed apply")
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry after a failed try: %v; want ErrNoPendingTry", err)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
}

func TestTryVerifyFailureStandsDown(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	_, err := Try(context.Background(), testutil.Logger(t), layout, tryTestLinks,
		func(context.Context) error { return nil },
		func(context.Context) error { return ErrVerify },
		10*time.Second)
	if !errors.Is(err, ErrVerify) {
		t.Fatalf("Try: %v; want ErrVerify", err)
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry: %v; want ErrNoPendingTry", err)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
}

func TestTryConfirmStandsDown(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	p, err := Try(context.Background(), testutil.Logger(t), layout, tryTestLinks,
		func(context.Context) error { return nil }, nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !p.WatchdogRunning() {
		t.Fatalf("watchdog %d not running after Try", p.WatchdogPID)
	}
	got, err := PendingTry(layout)
	if err != nil || got.ID != p.ID || got.WatchdogPID != p.WatchdogPID {
		t.Fatalf("PendingTry = %+v, %v; want the try %s", got, err, p.ID)
	}
	if r := got.Remaining(time.Now()); r < 25*time.Second || r > 30*time.Second {
		t.Errorf("Remaining = %v; want about 30s", r)
	}
	// A hung-up terminal or a stray ^C does not stop the watchdog.
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if err := syscall.Kill(p.WatchdogPID, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if !p.WatchdogRunning() {
		t.Fatal("watchdog died of SIGHUP or SIGINT")
	}
	// A second try is refused while this one is pending.
	_, err = Try(context.Background(), testutil.Logger(t), layout, tryTestLinks,
		func(context.Context) error { t.Error("second try applied"); return nil }, nil, 30*time.Second)
	if !errors.Is(err, ErrTryPending) {
		t.Errorf("second Try: %v; want ErrTryPending", err)
	}
	if err := Confirm(context.Background(), layout); err != nil {
		t.Fatal(err)
	}
	// The watchdog is woken, not left to poll.
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
	if err := Confirm(context.Background(), layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("second Confirm: %v; want ErrNoPendingTry", err)
	}
}

func TestTryWatchdogRollsBackAtDeadline(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	start := time.Now()
	p, err := Try(context.Background(), testutil.Logger(t), layout, tryTestLinks,
		func(context.Context) error { return nil }, nil, TryMargin)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := PendingTry(layout); errors.Is(err, ErrNoPendingTry) {
			break
		}
		if time.Since(start) > TryMargin+3*time.Second {
			t.Fatalf("record still there %v after the try began (deadline %v)", time.Since(start), TryMargin)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if el := time.Since(start); el < TryMargin-500*time.Millisecond {
		t.Errorf("rolled back after %v; want no sooner than the %v deadline", el, TryMargin)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
	logb, err := os.ReadFile(filepath.Join(layout.LogDir(), wdLogName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logb), "network try rolled back") || !strings.Contains(string(logb), p.ID) {
		t.Errorf("watchdog log lacks the rollback of %s:\n%s", p.ID, logb)
	}
}

// A program that does not run the watchdog must fail Try before anything
// is applied. Not parallel: it replaces wdExecutable.
func TestTryWatchdogMustStart(t *testing.T) {
	old := wdExecutable
	defer func() { wdExecutable = old }()
	wdExecutable = func() (string, error) { return "/bin/true", nil }
	layout := paths.New(t.TempDir())
	_, err := Try(context.Background(), testutil.Logger(t), layout, tryTestLinks,
		func(context.Context) error { t.Error("applied without a watchdog"); return nil }, nil, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "reexec.Init") {
		t.Errorf("Try: %v; want an error naming reexec.Init", err)
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry: %v; want ErrNoPendingTry", err)
	}
}

func TestTryRefusesShortDeadline(t *testing.T) {
	layout := paths.New(t.TempDir())
	_, err := Try(context.Background(), testutil.Logger(t), layout, tryTestLinks,
		func(context.Context) error { t.Error("applied"); return nil }, nil, time.Second)
	var dl *DeadlineTooShortError
	if !errors.Is(err, ErrDeadlineTooShort) || !errors.As(err, &dl) || dl.Got != time.Second || dl.Min != 5*time.Second {
		t.Errorf("Try: %v; want a *DeadlineTooShortError of 1s, at least 5s", err)
	}
}
