//go:build integration

package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// The inventory follows a real QEMU test guest through its own events
// socket and inotify: start, pause, resume and a kill each reach the
// director as a delta within a second, with the reconciliation an hour
// away; a reconciliation afterwards finds nothing the events missed.
func TestIntegrationInventoryGuest(t *testing.T) {
	testutil.RequireRoot(t, "QEMU guests run as root here")
	testutil.RequireCommand(t, "qemu-system-x86_64", "apt-get install qemu-system-x86")
	dir, _ := filepath.Abs(filepath.Join("..", "build", "guest"))
	kernel, initrd := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "initrd.img")
	if _, err := os.Stat(kernel); err != nil {
		kernel = filepath.Join(dir, "vmlinuz")
	}
	for _, p := range []string{kernel, initrd} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("test guest missing (%s): run `make guest`", p)
		}
	}
	root, err := os.MkdirTemp("/tmp", "vi") // socket paths: short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	l := paths.New(root)
	m := vm.NewManager(vm.Options{Layout: l, Accel: func(context.Context) (string, string) { return "tcg", "test" }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := m.Create(ctx, &vm.VirtualMachine{APIVersion: vm.APIVersion, Kind: vm.Kind, Metadata: vm.Metadata{Name: "inv"},
		Spec: vm.Spec{MemoryMiB: 256, Accel: "tcg", Boot: &vm.Boot{Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0"}}})
	if err != nil {
		t.Fatal(err)
	}
	uid := v.Metadata.UID
	t.Cleanup(func() { _ = m.Delete(context.Background(), uid, true) })

	iv := newInventory(m, l, nil)
	iv.reconcileEvery = time.Hour
	done := make(chan struct{})
	go func() { iv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	full, err := iv.Full(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	w := newDeltaWaiter(t, iv, full)
	w.until("created", time.Second, phaseIs(uid, vm.PhaseStopped))

	steps := []struct {
		what  string
		do    func() error
		phase string
	}{
		{"start", func() error { return m.StartWith(ctx, uid, vm.StartOptions{}) }, vm.PhaseRunning},
		{"pause", func() error { return m.Pause(ctx, uid) }, vm.PhasePaused},
		{"resume", func() error { return m.Resume(ctx, uid) }, vm.PhaseRunning},
		{"kill", func() error { return m.Kill(ctx, uid) }, vm.PhaseStopped},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		returned := time.Now()
		w.until(s.what, time.Second, phaseIs(uid, s.phase))
		t.Logf("%s: the call took %v, its delta came %v after", s.what, returned.Sub(start).Round(time.Millisecond), time.Since(returned).Round(time.Millisecond))
	}
	if n, err := iv.reconcile(ctx); err != nil || n != 0 {
		t.Errorf("reconcile after the events: %d changes, %v; want 0 (state %v)", n, err, w.state)
	}
}
