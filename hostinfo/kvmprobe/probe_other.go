//go:build !(linux && amd64)

package kvmprobe

import (
	"runtime"
	"time"
)

// runProbe: the guest programs are x86 real-mode code and the ioctl numbers
// are those of linux/amd64, so elsewhere the probe can only say so.
func runProbe(device string, _ time.Duration, _ func(Result)) Result {
	return Result{Device: device, Stage: StageOpen,
		Error: "kvm probe not implemented on " + runtime.GOOS + "/" + runtime.GOARCH}
}
