//go:build !unix

package kvmprobe

import "os/exec"

func setProcessGroup(*exec.Cmd) {}

func killProcessGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
