// Package integration holds the tests that run against the real parts:
// the live host's /proc, /sys and /dev, a real KVM probe, real QEMU. They
// are built only with -tags integration and need root; each skips with the
// reason when a part is missing (internal/testutil's RequireRoot and
// RequireCommand).
//
// They change the host only inside what they make: temp roots, network
// namespaces, test users and PAM services (internal/pamtest), and guests
// whose QEMU they kill at cleanup; never the host's own links, VMs or
// accounts. Nothing outside this package imports it.
package integration
