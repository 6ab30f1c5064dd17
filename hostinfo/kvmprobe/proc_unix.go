//go:build unix

package kvmprobe

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the child in a new process group led by itself, so
// that it and anything it started can be killed together.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup SIGKILLs the child's whole process group. Run calls it
// before it has seen the child reaped, so the pid (the group id) has not
// been reused.
func killProcessGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}
