package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// rig is what a benchmark with test guests works with: the guest's kernel
// and initrd, a private --root (its QEMUs killed and the root removed at
// the end, by runCleanups), and run, which runs virt under it.
type rig struct {
	kernel, initrd, root string
	virt                 string
}

// newRig sets up a rig for the benchmark what, or says it is skipped and
// returns nil when there is no test guest (make guest). The caller defers
// runCleanups.
func newRig(virt, guestDir, what, prefix string) *rig {
	guestDir, _ = filepath.Abs(guestDir)
	r := &rig{virt: virt, kernel: filepath.Join(guestDir, "vmlinux"), initrd: filepath.Join(guestDir, "initrd.img")}
	if _, err := os.Stat(r.kernel); err != nil {
		r.kernel = filepath.Join(guestDir, "vmlinuz")
	}
	if _, err := os.Stat(r.initrd); err != nil {
		fmt.Printf("%-28s skipped: no test guest (make guest)\n", what)
		return nil
	}
	root, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		fatal(err)
	}
	r.root = root
	cleanups = append(cleanups, func() { killUnder(root); os.RemoveAll(root) })
	return r
}

// run runs virt --root ROOT args and returns its stdout; a failure ends
// the benchmark with virt's stderr.
func (r *rig) run(args ...string) string {
	out, err := exec.Command(r.virt, append([]string{"--root", r.root}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		fatal(fmt.Errorf("virt %s: %v: %s", strings.Join(args, " "), err, stderr))
	}
	return string(out)
}
