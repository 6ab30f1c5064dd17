//go:build integration

package qmp

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestIntegrationMigrateToFD saves a real QEMU's state through a
// descriptor passed with SendFD, and loads it into a second QEMU started
// with -incoming defer through another: what vm.Manager.Save and a resume
// do.
func TestIntegrationMigrateToFD(t *testing.T) {
	cmdSock, _, _ := startQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := Dial(ctx, cmdSock, Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer m.Close()

	path := filepath.Join(t.TempDir(), "state")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SendFD(ctx, "state", f); err != nil {
		t.Fatalf("SendFD: %v", err)
	}
	f.Close() // QEMU holds its own copy
	if err := m.SetMigrationBandwidth(ctx, 1<<40); err != nil {
		t.Fatalf("SetMigrationBandwidth: %v", err)
	}
	if err := m.Migrate(ctx, "fd:state"); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	info := waitMigration(ctx, t, m)
	if info.Status != MigrationCompleted {
		t.Fatalf("migration: got %+v; want completed", info)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// QEMU's migration stream: magic QEVM, version 3
	if !bytes.HasPrefix(b, []byte("QEVM\x00\x00\x00\x03")) {
		t.Fatalf("the state file starts %q; want QEMU's migration stream (QEVM, version 3)", b[:min(len(b), 8)])
	}
	if info.RAM == nil || info.RAM.Total == 0 {
		t.Errorf("query-migrate: no RAM counters in %+v", info)
	}
	t.Logf("saved %d bytes (RAM %+v)", len(b), info.RAM)
	if st, err := m.Status(ctx); err != nil || st.Status != "postmigrate" {
		t.Errorf("status after the migration: got %+v, %v; want postmigrate", st, err)
	}

	// a second QEMU loads it
	in, _, _ := startQEMU(t, "-incoming", "defer")
	m2, err := Dial(ctx, in, Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Dial incoming: %v", err)
	}
	defer m2.Close()
	if st, err := m2.Status(ctx); err != nil || st.Status != "inmigrate" {
		t.Fatalf("incoming QEMU: got %+v, %v; want inmigrate", st, err)
	}
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := m2.SendFD(ctx, "state", r); err != nil {
		t.Fatalf("SendFD incoming: %v", err)
	}
	if err := m2.MigrateIncoming(ctx, "fd:state"); err != nil {
		t.Fatalf("MigrateIncoming: %v", err)
	}
	if info := waitMigration(ctx, t, m2); info.Status != MigrationCompleted {
		t.Fatalf("incoming migration: got %+v; want completed", info)
	}
	// the source was paused (-S: prelaunch), so the loaded VM is too
	if st, err := m2.Status(ctx); err != nil || st.Running {
		t.Errorf("after loading: got %+v, %v; want a VM that is not running until cont", st, err)
	}
	if err := m2.Cont(ctx); err != nil {
		t.Fatalf("Cont: %v", err)
	}
	if st, err := m2.Status(ctx); err != nil || st.Status != "running" {
		t.Errorf("after cont: got %+v, %v; want running", st, err)
	}
}

func waitMigration(ctx context.Context, t *testing.T, m *Monitor) MigrationInfo {
	t.Helper()
	for {
		info, err := m.QueryMigrate(ctx)
		if err != nil {
			t.Fatalf("QueryMigrate: %v", err)
		}
		if info.Done() {
			return info
		}
		select {
		case <-ctx.Done():
			t.Fatalf("migration not done: %+v", info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
