//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// recordingScopes stands in for systemd's scopes (package systemd): it
// records each Place and fails when told to.
type recordingScopes struct {
	mu    sync.Mutex
	calls []string // uid name pid
	pids  []int
	err   error
}

func (s *recordingScopes) Place(_ context.Context, uid, name string, pid int) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf("%s %s", uid, name))
	s.pids = append(s.pids, pid)
	return "virtcon-vm-" + uid + ".scope", s.err
}

// A start with scopes puts the new QEMU (the daemon, not its parent) in
// its scope; a start whose QEMU cannot be placed is refused and leaves
// nothing running: the VM would otherwise live in the cgroup of whatever
// started it and die with that unit.
func TestIntegrationVMStartPlacesScope(t *testing.T) {
	g := requireGuest(t)
	root := vmRoot(t)
	scopes := &recordingScopes{}
	m := vm.NewManager(vm.Options{Layout: paths.New(root), Logger: testutil.Logger(t), Scopes: scopes})
	ctx := context.Background()
	for _, name := range []string{"placed", "refused"} {
		spec := &vm.VirtualMachine{APIVersion: vm.APIVersion, Kind: vm.Kind, Metadata: vm.Metadata{Name: name},
			Spec: vm.Spec{CPUs: 1, MemoryMiB: 128, Accel: "tcg", Boot: &vm.Boot{Kernel: g.kernel, Initrd: g.initrd, Cmdline: "console=ttyS0"}}}
		if _, err := m.Create(ctx, spec); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}

	if err := m.Start(ctx, "placed"); err != nil {
		t.Fatalf("start placed: %v", err)
	}
	v, _, err := m.Get(ctx, "placed")
	if err != nil {
		t.Fatal(err)
	}
	if len(scopes.pids) != 1 || scopes.pids[0] != v.Status.PID || scopes.calls[0] != v.Metadata.UID+" placed" {
		t.Errorf("Place calls: got %v pids %v; want one for %s placed, pid %d", scopes.calls, scopes.pids, v.Metadata.UID, v.Status.PID)
	}
	// the build machine has no systemd: the cgroup is the shared root,
	// whose numbers are the host's, not the VM's
	if c := v.Status.Cgroup; c == nil || c.Path == "" {
		t.Errorf("status.cgroup of a running VM: got %+v; want its cgroup path", c)
	} else if c.Unit == nil && (c.CPUSeconds != nil || c.MemoryBytes != nil) {
		if procs, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/unified", c.Path, "cgroup.procs")); string(procs) != strconv.Itoa(v.Status.PID)+"\n" {
			t.Errorf("status.cgroup %+v: numbers of a cgroup the VM shares; want null", c)
		}
	}

	scopes.err = errors.New("systemd said no")
	err = m.Start(ctx, "refused")
	var se *vm.ScopeError
	if !errors.Is(err, vm.ErrScope) || !errors.As(err, &se) || se.Name != "refused" {
		t.Fatalf("start refused: got %v; want a *vm.ScopeError for refused", err)
	}
	r, _, err := m.Get(ctx, "refused")
	if err != nil {
		t.Fatal(err)
	}
	if r.Spec.Running || r.Status.PID != 0 {
		t.Errorf("after a refused start: spec.running %v, pid %d; want false, 0", r.Spec.Running, r.Status.PID)
	}
	if pid := scopes.pids[len(scopes.pids)-1]; processAlive(pid) {
		t.Errorf("the refused start's QEMU (pid %d) still runs; want it stopped again", pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(qemuPIDsUnder(root)) != 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(qemuPIDsUnder(root)); n != 1 {
		t.Errorf("QEMUs under the root: got %d; want 1 (placed only)", n)
	}
}

func processAlive(pid int) bool {
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	return err == nil && !strings.Contains(string(st), ") Z ")
}
