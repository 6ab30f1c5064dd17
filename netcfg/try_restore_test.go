package netcfg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
)

// restoreTestFakeDHCP makes the DHCP client a script that writes an empty
// lease at once and sleeps: a client as ensureDHCPClient and
// stopDHCPClient see one (pidfile, environment, lease file), with no
// netlink. Every client of layout is stopped at the end of the test.
// Not for parallel tests: it replaces dhcpExecutable.
func restoreTestFakeDHCP(t *testing.T, layout paths.Layout) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "fake-dhcp-client")
	// The shell itself is the client: an exec after the lease is written
	// would race ensureDHCPClient's check of the environment.
	body := "#!/bin/sh\necho '{}' > \"$" + dhcpLeaseEnv + "\"\nwhile :; do sleep 1; done\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	old := dhcpExecutable
	dhcpExecutable = func() (string, error) { return script, nil }
	t.Cleanup(func() {
		dhcpExecutable = old
		ifaces, _ := dhcpRunningClients(layout)
		for _, iface := range ifaces {
			_, _ = stopDHCPClient(layout, iface)
		}
	})
}

// A rollback leaves the management DHCP clients as they were before the
// try: one the try stopped (DHCP to static) runs again, one it started
// (static to DHCP) is stopped; by `virt net rollback` and after a failed
// verify alike.
func TestTryRollbackRestoresDHCPClients(t *testing.T) {
	log := testutil.Logger(t)
	tests := []struct {
		name       string
		before     []string // clients running before the try
		apply      func(ctx context.Context, layout paths.Layout) error
		failVerify bool
	}{
		{"dhcp to static, rolled back", []string{"vcfake0"}, func(_ context.Context, layout paths.Layout) error {
			_, err := stopDHCPClient(layout, "vcfake0")
			return err
		}, false},
		{"dhcp to static, verify failed", []string{"vcfake0"}, func(_ context.Context, layout paths.Layout) error {
			_, err := stopDHCPClient(layout, "vcfake0")
			return err
		}, true},
		{"static to dhcp, rolled back", nil, func(ctx context.Context, layout paths.Layout) error {
			_, err := ensureDHCPClient(ctx, log, layout, "vcfake1")
			return err
		}, false},
		{"static to dhcp, verify failed", nil, func(ctx context.Context, layout paths.Layout) error {
			_, err := ensureDHCPClient(ctx, log, layout, "vcfake1")
			return err
		}, true},
		{"dhcp moves to another interface", []string{"vcfake0"}, func(ctx context.Context, layout paths.Layout) error {
			if _, err := ensureDHCPClient(ctx, log, layout, "vcfake1"); err != nil {
				return err
			}
			_, err := stopDHCPClient(layout, "vcfake0")
			return err
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			layout := paths.New(t.TempDir())
			tryTestKillWatchdogs(t, PendingPath(layout))
			restoreTestFakeDHCP(t, layout)
			for _, iface := range tc.before {
				if _, err := ensureDHCPClient(ctx, log, layout, iface); err != nil {
					t.Fatal(err)
				}
			}
			boom := errors.New("boom")
			var verify func(context.Context) error
			if tc.failVerify {
				verify = func(context.Context) error { return boom }
			}
			p, err := Try(ctx, log, layout, tryTestLinks, func(ctx context.Context) error { return tc.apply(ctx, layout) }, verify, 30*time.Second)
			if tc.failVerify {
				if !errors.Is(err, boom) || !strings.Contains(err.Error(), "restored") {
					t.Fatalf("Try: %v; want the verify error, saying the state was restored", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(p.DHCPClients, tc.before) {
					t.Errorf("pending try records DHCP clients %q; want %q", p.DHCPClients, tc.before)
				}
				if err := Rollback(ctx, layout); err != nil {
					t.Fatal(err)
				}
			}
			got, err := dhcpRunningClients(layout)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.before) {
				t.Errorf("DHCP clients after the rollback: %q; want %q, as before the try", got, tc.before)
			}
			tryTestNoWatchdogWithin(t, PendingPath(layout), 3*time.Second)
		})
	}
}

// restoreTestSystem is a root whose resolv.conf is a symbolic link (as
// with systemd-resolved) and whose hostname file is a regular file.
func restoreTestSystem(t *testing.T) paths.Layout {
	t.Helper()
	layout := paths.New(t.TempDir())
	etc := filepath.Join(layout.Root, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../run/systemd/resolve/stub-resolv.conf", filepath.Join(etc, "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "hostname"), []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return layout
}

// restoreTestApplySystem is an apply that writes DNS and a host name.
func restoreTestApplySystem(layout paths.Layout) func(context.Context) error {
	return func(context.Context) error {
		_, err := applySystem(layout, &Config{Hostname: "during", DNS: DNS{Servers: []string{"192.0.2.53"}}})
		return err
	}
}

func restoreTestCheckSystem(t *testing.T, layout paths.Layout) {
	t.Helper()
	etc := filepath.Join(layout.Root, "etc")
	if target, err := os.Readlink(filepath.Join(etc, "resolv.conf")); err != nil || target != "../run/systemd/resolve/stub-resolv.conf" {
		t.Errorf("resolv.conf after the rollback: link to %q, %v; want the link to ../run/systemd/resolve/stub-resolv.conf back", target, err)
	}
	path := filepath.Join(etc, "hostname")
	if b, err := os.ReadFile(path); err != nil || string(b) != "before\n" {
		t.Errorf("hostname after the rollback: %q, %v; want %q", b, err, "before\n")
	}
	if st, err := os.Lstat(path); err != nil {
		t.Error(err)
	} else if st.Mode() != 0o644 {
		t.Errorf("hostname after the rollback: mode %v; want a regular file, 0644", st.Mode())
	}
	var names []string
	ents, _ := os.ReadDir(etc)
	for _, e := range ents {
		if e.Name() != "virtcon" { // the layout's config directory
			names = append(names, e.Name())
		}
	}
	if !slices.Equal(names, []string{"hostname", "resolv.conf"}) {
		t.Errorf("%s after the rollback holds %q; want hostname and resolv.conf only", etc, names)
	}
}

// A rollback puts DNS and the host name back as they were: a replaced
// symbolic link comes back as the link, a rewritten file as it was, a
// file the try created is removed.
func TestTryRollbackRestoresSystem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := testutil.Logger(t)
	t.Run("rollback", func(t *testing.T) {
		t.Parallel()
		layout := restoreTestSystem(t)
		tryTestKillWatchdogs(t, PendingPath(layout))
		if _, err := Try(ctx, log, layout, tryTestLinks, restoreTestApplySystem(layout), nil, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(layout.Root, "etc", "hostname"))
		if err != nil || string(b) != "during\n" {
			t.Fatalf("hostname during the try: %q, %v; want the tried one", b, err)
		}
		if err := Rollback(ctx, layout); err != nil {
			t.Fatal(err)
		}
		restoreTestCheckSystem(t, layout)
	})
	t.Run("verify failed", func(t *testing.T) {
		t.Parallel()
		layout := restoreTestSystem(t)
		tryTestKillWatchdogs(t, PendingPath(layout))
		_, err := Try(ctx, log, layout, tryTestLinks, restoreTestApplySystem(layout),
			func(context.Context) error { return ErrVerify }, 30*time.Second)
		if !errors.Is(err, ErrVerify) {
			t.Fatalf("Try: %v; want ErrVerify", err)
		}
		restoreTestCheckSystem(t, layout)
	})
	t.Run("created files removed", func(t *testing.T) {
		t.Parallel()
		layout := paths.New(t.TempDir())
		tryTestKillWatchdogs(t, PendingPath(layout))
		if _, err := Try(ctx, log, layout, tryTestLinks, restoreTestApplySystem(layout), nil, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := Rollback(ctx, layout); err != nil {
			t.Fatal(err)
		}
		for _, f := range systemFiles(layout) {
			if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s after the rollback: %v; want it gone, as before the try", f, err)
			}
		}
	})
}

// The watchdog's rollback at the deadline restores DNS and the host name
// too, and drops the tried desired file.
func TestTryWatchdogRestoresSystemAndDropsPendingFile(t *testing.T) {
	t.Parallel()
	layout := restoreTestSystem(t)
	tryTestKillWatchdogs(t, PendingPath(layout))
	start := time.Now()
	if _, err := Try(context.Background(), testutil.Logger(t), layout, tryTestLinks, restoreTestApplySystem(layout), nil, TryMargin); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, DesiredPendingFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: during\n")
	for {
		if _, err := PendingTry(layout); errors.Is(err, ErrNoPendingTry) {
			break
		}
		if time.Since(start) > TryMargin+5*time.Second {
			t.Fatalf("record still there %v after the try began (deadline %v)", time.Since(start), TryMargin)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
	restoreTestCheckSystem(t, layout)
	if _, err := os.Stat(DesiredPendingFile(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after the watchdog's rollback: %v; want it removed", DesiredPendingFile(layout), err)
	}
}

// restoreTestRecord writes a pending try as a try leaves it (its watchdog
// long gone).
func restoreTestRecord(t *testing.T, layout paths.Layout, edit func(*Pending)) {
	t.Helper()
	now := time.Now()
	p := &Pending{ID: "0123456789abcdef", Started: now, Deadline: now.Add(time.Minute), Snapshot: snapTestSnapshot()}
	if edit != nil {
		edit(p)
	}
	if err := tryWrite(PendingPath(layout), p); err != nil {
		t.Fatal(err)
	}
}

// A try whose rollback failed, or whose deadline passed, cannot be kept:
// the host may be half restored, or the watchdog is restoring it.
func TestConfirmRefusesEndedTry(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Pending)
		want []string
	}{
		{"rollback failed", func(p *Pending) { p.RollbackError = "restore: link br0: operation not permitted" },
			[]string{"rolling back try 0123456789abcdef failed", "operation not permitted"}},
		{"deadline passed", func(p *Pending) { p.Deadline = time.Now().Add(-time.Second) },
			[]string{"deadline", "has passed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for name, confirm := range map[string]func(context.Context, paths.Layout) error{"Confirm": Confirm, "ConfirmDesired": ConfirmDesired} {
				layout := paths.New(t.TempDir())
				restoreTestRecord(t, layout, tc.edit)
				writeTestFile(t, DesiredPendingFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\n")
				err := confirm(context.Background(), layout)
				var nc *NotConfirmableError
				if !errors.Is(err, ErrNotConfirmable) || !errors.As(err, &nc) || nc.ID != "0123456789abcdef" {
					t.Fatalf("%s = %v; want a *NotConfirmableError of try 0123456789abcdef", name, err)
				}
				var pend Pending
				tc.edit(&pend)
				if nc.RollbackError != pend.RollbackError {
					t.Errorf("%s: RollbackError %q; want %q", name, nc.RollbackError, pend.RollbackError)
				}
				// what to run is the face's to say
				if strings.Contains(err.Error(), "virt ") {
					t.Errorf("%s error %q names a CLI command", name, err)
				}
				for _, s := range tc.want {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s error %q lacks %q", name, err, s)
					}
				}
				if _, err := PendingTry(layout); err != nil {
					t.Errorf("%s refused, but the record is gone: %v", name, err)
				}
				if _, err := os.Stat(DesiredFile(layout)); err == nil {
					t.Errorf("%s refused, but wrote %s", name, DesiredFile(layout))
				}
			}
		})
	}
}

// ConfirmDesired keeps only a try whose tried file is there and is its
// own: otherwise network.yaml would not describe the kept network.
func TestConfirmDesiredChecksPendingFile(t *testing.T) {
	const tried = "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: tried\n"
	const before = "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: before\n"
	tests := []struct {
		name    string
		pending string // "" = no file
		want    string // error substring; "" = kept
	}{
		{"missing", "", "is missing"},
		{"another try's", "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: stale\n", "is not the file try 0123456789abcdef applied"},
		{"its own", tried, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			restoreTestRecord(t, layout, func(p *Pending) { p.DesiredSHA256 = desiredSum([]byte(tried)) })
			writeTestFile(t, DesiredFile(layout), before)
			if tc.pending != "" {
				writeTestFile(t, DesiredPendingFile(layout), tc.pending)
			}
			err := ConfirmDesired(context.Background(), layout)
			got, _ := os.ReadFile(DesiredFile(layout))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != tried {
					t.Errorf("desired file after confirm = %q; want the tried one", got)
				}
				if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
					t.Errorf("PendingTry after confirm = %v; want ErrNoPendingTry", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing confirmed") {
				t.Fatalf("ConfirmDesired = %v; want an error saying %q and nothing confirmed", err, tc.want)
			}
			var tf *TriedFileError
			if !errors.As(err, &tf) || tf.ID != "0123456789abcdef" || tf.Missing != (tc.pending == "") || tf.Path != DesiredPendingFile(layout) {
				t.Errorf("ConfirmDesired = %#v; want a *TriedFileError of try 0123456789abcdef, missing %t", err, tc.pending == "")
			}
			if strings.Contains(err.Error(), "virt ") {
				t.Errorf("ConfirmDesired = %v; names a CLI command (the face's to say)", err)
			}
			if _, err := PendingTry(layout); err != nil {
				t.Errorf("refused confirm removed the record: %v", err)
			}
			if string(got) != before {
				t.Errorf("desired file after a refused confirm = %q; want it unchanged", got)
			}
		})
	}
}

// A tried desired file left behind is dropped when a new try starts and
// when a try is rolled back, so that no later confirm can promote it.
func TestTryDropsLeftoverPendingFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := paths.New(t.TempDir())
	tryTestKillWatchdogs(t, PendingPath(layout))
	writeTestFile(t, DesiredPendingFile(layout), "stale")
	if _, err := Try(ctx, testutil.Logger(t), layout, tryTestLinks, func(context.Context) error { return nil }, nil, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(DesiredPendingFile(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover %s after a new try started: %v; want it removed", DesiredPendingFile(layout), err)
	}
	writeTestFile(t, DesiredPendingFile(layout), "this try's")
	if err := Rollback(ctx, layout); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(DesiredPendingFile(layout)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after a rollback: %v; want it removed", DesiredPendingFile(layout), err)
	}
	tryTestNoWatchdogWithin(t, PendingPath(layout), 2*time.Second)
}

// A DHCP client started from a try's watchdog must not inherit the
// watchdog's variables: it would run as a watchdog instead.
func TestDHCPEnvironDropsWatchdog(t *testing.T) {
	t.Setenv(WatchdogEnv, "/x/pending.json")
	t.Setenv(wdIDEnv, "abc")
	t.Setenv(wdReadyEnv, "3")
	for _, kv := range dhcpEnviron(dhcpFilesFor(paths.New("/x"), "eth0"), "eth0") {
		if k, _, _ := strings.Cut(kv, "="); k == WatchdogEnv || k == wdIDEnv || k == wdReadyEnv {
			t.Errorf("DHCP client environment has %s", kv)
		}
	}
}
