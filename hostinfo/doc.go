// Package hostinfo inspects a KVM host: its hardware inventory and a set of
// health checks with PASS/WARN/FAIL/UNKNOWN results and a fix for each.
//
// Everything is read under a configurable host root ("/" for the live
// machine, a fixture tree under testdata/hosts for tests, or a mounted
// system). The rule is that capabilities reflect real support only:
// whatever cannot be read or proven is UNKNOWN, never a silent zero or a
// guessed yes. KVM counts as usable only when the real probe (package
// kvmprobe) ran guest code at hardware-like speed.
//
// hostinfo never changes the host. It imports neither cobra nor Bubble Tea.
package hostinfo
