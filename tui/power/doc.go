// Package power is the DCUI's Power screen: reboot or power off the host,
// each behind a confirmation dialog that says how many VMs are running,
// names up to five of them, and says what becomes of them: the host
// policy's shutdown (host.Host.ShutdownGuests) takes virtcon's VMs down
// first, with its progress on the screen, before the host is asked to go
// down; guests virtcon does not manage die with the host.
//
// The dialog answers as every DCUI confirmation does (common.Confirmed):
// y goes ahead, any other key cancels, so a stray enter never takes the
// host down. Read-only consoles are refused with the session's reason.
// The screen holds no host logic: the running-VM rule and the warning
// text come from package power (shared with `virt host reboot`), the
// shutdown and its plan from package host, and the actions are injected
// functions, fakes in tests.
package power
