// Package netcfg owns the host's network configuration: a versioned
// declarative file (network.yaml), the live state read by netlink, a plan
// of the differences, and an apply that changes only what differs, each
// step on a revert stack. A "try" applies with an automatic rollback at a
// deadline unless confirmed; the rollback is done by a separate watchdog
// process, so a killed CLI or a dropped SSH session still gets it.
//
// It talks to the kernel through netlink only (github.com/vishvananda/netlink):
// it never shells out to ip(8). It imports neither cobra nor Bubble Tea.
package netcfg
