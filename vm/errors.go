package vm

import (
	"fmt"
	"strings"
)

// The core's errors carry the facts; each face words what to do about
// them (the CLI names its commands and flags, the DCUI its keys).

// ImageNotFoundError is an image that is not in the store.
type ImageNotFoundError struct{ Name string }

func (e *ImageNotFoundError) Error() string { return fmt.Sprintf("image %q: %v", e.Name, ErrNotFound) }

// Is makes errors.Is(err, ErrNotFound) true.
func (e *ImageNotFoundError) Is(target error) bool { return target == ErrNotFound }

// ImageExistsError is an image name already taken in the store.
type ImageExistsError struct{ Name string }

func (e *ImageExistsError) Error() string { return fmt.Sprintf("image %q: %v", e.Name, ErrExists) }

// Is makes errors.Is(err, ErrExists) true.
func (e *ImageExistsError) Is(target error) bool { return target == ErrExists }

// ImageInUseError is an image that VMs' disks use: by VMs with a spec
// (VMs), or by disk files left without one (Disks).
type ImageInUseError struct {
	Name  string
	VMs   []string
	Disks []string
}

func (e *ImageInUseError) Error() string {
	if len(e.VMs) > 0 {
		return fmt.Sprintf("image %q: %v by %s", e.Name, ErrInUse, strings.Join(e.VMs, ", "))
	}
	return fmt.Sprintf("image %q: %v by disk files without a VM spec: %s", e.Name, ErrInUse, strings.Join(e.Disks, ", "))
}

// Is makes errors.Is(err, ErrInUse) true.
func (e *ImageInUseError) Is(target error) bool { return target == ErrInUse }

// RunningError is an operation refused because the VM runs.
type RunningError struct {
	Name, Op string
	PID      int
}

func (e *RunningError) Error() string {
	return fmt.Sprintf("vm %q: %s: %v (pid %d)", e.Name, e.Op, ErrRunning, e.PID)
}

// Is makes errors.Is(err, ErrRunning) true.
func (e *RunningError) Is(target error) bool { return target == ErrRunning }

// SocketPathError is a runtime socket path over the kernel's limit for
// unix sockets: the state root is too deep.
type SocketPathError struct {
	Path string
	Len  int
}

// MaxSocketPath is the longest unix socket path (sockaddr_un holds 108
// bytes with the NUL).
const MaxSocketPath = 107

func (e *SocketPathError) Error() string {
	return fmt.Sprintf("socket path %s is %d bytes, over the kernel's %d", e.Path, e.Len, MaxSocketPath)
}

// UnknownNetworkError is a NIC's network that the applied host network
// configuration does not have.
type UnknownNetworkError struct{ Network string }

func (e *UnknownNetworkError) Error() string {
	return fmt.Sprintf("no network %q in the applied host network configuration", e.Network)
}

// Reasons say why an entry is in its class or phase, for faces to word
// (Entry.Reason, Image.Reason). Stable: scripts may branch on them.
const (
	// ReasonProcessGone: the spec says running, the QEMU process is gone.
	ReasonProcessGone = "process-gone"
	// ReasonIncomplete: an image file of an interrupted pull or import.
	ReasonIncomplete = "incomplete"
)
