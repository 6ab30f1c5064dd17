// Package kvmprobe owns the real KVM probe: it decides whether /dev/kvm can
// actually run guest code at hardware-like speed, rather than trusting CPU
// flags or the mere presence of the device node (what kvm-ok does).
//
// The probe creates a throw-away VM with raw ioctls (golang.org/x/sys/unix,
// no cgo), runs two tiny hand-assembled 16-bit real-mode programs in it and
// checks their I/O and HLT exits, then times a tight guest loop. A KVM
// implementation that opens and creates VMs but runs guests orders of
// magnitude too slowly (for example kvm_pvm inside a nested VM, or anything
// that emulates instead of executing natively) fails the probe.
//
// Because a broken KVM can hang the calling thread inside KVM_RUN, the probe
// always runs in a child process (the current executable re-executed in
// the "kvm-probe" child mode of internal/reexec, VIRTCON_KVM_PROBE_CHILD
// naming the device) under a hard deadline; the parent kills the child's
// whole process group when the deadline passes. Programs using Run must
// call reexec.Init first thing in main (and tests in TestMain).
//
// The package owns only this probe and its verdict; caching the verdict
// per boot is hostinfo's. It never changes the host and it leaves no VM
// behind: everything it creates lives and dies with the child process. It
// imports neither cobra nor Bubble Tea.
package kvmprobe
