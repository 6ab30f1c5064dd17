// Package vm owns virtual machines as plain qemu-system processes: the
// manifest and its admission chain (decode, defaults, validate), the store
// of specs on disk, base images and per-VM disks, the NoCloud seed ISO, the
// QEMU command line, the lifecycle (start, stop, kill, pause, ...) and the
// classification of everything found on the host.
//
// A VM is owned by its QEMU process: nothing in this package runs after the
// calling command returns, and no virtcon process dying can stop a VM. The
// tools find a VM again by its UUID, which QEMU carries on its command line.
// It imports neither cobra nor Bubble Tea.
package vm
