package vm

import (
	"errors"
	"fmt"
	"time"
)

// ErrHotplugState is a disk or NIC change refused because the running VM
// is in no state to take a hot-plug (paused, unresponsive, shutting down).
var ErrHotplugState = errors.New("cannot hot-plug in this state")

// HotplugStateError says why a running VM takes no hot-plug now.
type HotplugStateError struct {
	Name, Op string
	Phase    string // Paused, Unresponsive, ...
	Detail   string
}

func (e *HotplugStateError) Error() string {
	msg := fmt.Sprintf("vm %q: %s: the VM is %s", e.Name, e.Op, e.Phase)
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	switch e.Phase {
	case PhasePaused:
		msg += ": resume it first (virt vm resume), or stop it to change the spec alone"
	case PhaseUnresponsive:
		msg += ": its QEMU does not answer; nothing was changed"
	}
	return msg
}

// Is makes errors.Is(err, ErrHotplugState) true.
func (e *HotplugStateError) Is(target error) bool { return target == ErrHotplugState }

// ErrUnplugTimeout is a device_del the guest did not acknowledge in time.
var ErrUnplugTimeout = errors.New("the guest did not acknowledge the unplug")

// UnplugTimeoutError: the guest never released the device (no hot-plug
// driver, or it refused): the device stays attached, the spec unchanged.
type UnplugTimeoutError struct {
	Name, Device string
	After        time.Duration
}

func (e *UnplugTimeoutError) Error() string {
	return fmt.Sprintf("vm %q: detach %s: %v within %s (does the guest run a PCIe hot-plug driver, pciehp?): the device stays attached and the spec is unchanged; QEMU removes it if the guest acknowledges later, run the detach again then",
		e.Name, e.Device, ErrUnplugTimeout, e.After)
}

// Is makes errors.Is(err, ErrUnplugTimeout) true.
func (e *UnplugTimeoutError) Is(target error) bool { return target == ErrUnplugTimeout }

// ErrNoFreePort: every hot-plug root port of the running VM is taken.
var ErrNoFreePort = errors.New("no free PCIe root port")

// ErrHotplugged: the running QEMU's devices differ from its command line
// (a disk or NIC was hot-plugged or detached since it started), which a
// saved state (Save) records its shape from.
var ErrHotplugged = errors.New("devices were hot-plugged since it started")
