// Package integration holds the tests that run against the real parts:
// the live host's /proc, /sys and /dev, a real KVM probe, real QEMU. They
// are built only with -tags integration and need root; each skips with the
// reason when a part is missing.
package integration
