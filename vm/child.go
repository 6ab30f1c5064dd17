package vm

import (
	"context"
	"os/exec"
	"runtime"
	"syscall"
)

// The qemu-img children of an operation die with it. A copy or a create
// that went on after virt was killed would write a VM's files after its
// lock is gone (a start could boot the half-written disk, gc could remove
// the directory under it). Pdeathsig asks the kernel to SIGKILL the child
// when the thread that forked it exits, which is when the process dies,
// or when the Go runtime ends that thread (a goroutine that exits while
// locked to it): the thread is pinned from Start to Wait, so only the
// end of this process ends it.

// childCommand is exec.CommandContext for a child that must not outlive
// this process (see runChild).
func childCommand(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// runChild starts cmd and waits for it on one locked OS thread, so that
// its Pdeathsig fires only when this process ends.
func runChild(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Wait()
}
