package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/vm"
)

// gcFake is the VM fake with a GC that lists what a host left by killed
// clones holds: a directory, a directory a QEMU holds open, a backup job
// in a QEMU, and a frozen layer whose mode gc puts right.
type gcFake struct{ *fakeVMs }

func (f gcFake) GC(_ context.Context, dryRun bool) ([]vm.Orphan, error) {
	if err := f.record("GC", dryRun); err != nil {
		return nil, err
	}
	return []vm.Orphan{
		{What: "volumes without a VM spec", Path: "/s/vms/a"},
		{What: "volumes without a VM spec", Path: "/s/vms/b", Kept: "open by QEMU pid 7 (/s/vms/b/disk-root.qcow2)"},
		{What: "backup job left by an interrupted clone in the QEMU of vm src", Path: "qemu:u1/job/clone-1-0"},
		{What: "frozen layer in use, left writable by an unfinished linked clone (vm src)", Path: "/s/vms/u1/frozen-root-1.qcow2", Fix: "mode 0600 -> 0444 (a frozen layer is read-only)"},
	}, nil
}

// TestVMGCWords: gc says what it does with each thing by its kind:
// removes files, cancels QEMU work, keeps what a QEMU holds open, fixes
// what it repairs; the dry run says the same in the conditional.
func TestVMGCWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"vm", "gc", "--dry-run"}, []string{
			"would remove /s/vms/a (volumes without a VM spec)",
			"kept /s/vms/b (volumes without a VM spec: open by QEMU pid 7 (/s/vms/b/disk-root.qcow2))",
			"would cancel qemu:u1/job/clone-1-0 (backup job left by an interrupted clone in the QEMU of vm src)",
			"would fix /s/vms/u1/frozen-root-1.qcow2 (frozen layer in use, left writable by an unfinished linked clone (vm src): mode 0600 -> 0444 (a frozen layer is read-only))",
		}},
		{[]string{"vm", "gc"}, []string{"removed /s/vms/a ", "kept /s/vms/b ", "cancelled qemu:u1/job/clone-1-0 ", "fixed /s/vms/u1/frozen-root-1.qcow2 "}},
	} {
		var out, errOut bytes.Buffer
		env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, vmSvc: gcFake{newFakeVMs()}}
		if code := runEnv(context.Background(), append([]string{"--root", t.TempDir()}, tc.args...), env); code != 0 {
			t.Fatalf("virt %v: exit %d: %s", tc.args, code, errOut.String())
		}
		// columns are aligned: compare with each run of blanks as one
		got := strings.Join(strings.Fields(out.String()), " ")
		for _, w := range tc.want {
			if !strings.Contains(got, strings.TrimSpace(w)) {
				t.Errorf("virt %v: stdout %q; want %q in it", tc.args, out.String(), w)
			}
		}
	}
}
