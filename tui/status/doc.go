// Package status is the DCUI's status screen, shown without login: what
// the host is, how to reach it, whether it can run VMs, what runs on it
// and whether a network change is on trial. It reads, with one exception:
// a network change on trial whose deadline passed while its watchdog is
// dead is rolled back (netcfg.ResolveExpiredTry), which is what the
// watchdog should have done, back to the known-good configuration from
// before the trial; so it happens even logged out or read-only. Every
// read is a tea.Cmd through an injected Sources, so Update never blocks
// and tests never touch the host.
//
// It holds no host rule: the rollback, the probe verdict and the web
// terminal's record are the core's (netcfg, hostinfo, webterm); it only
// draws them.
package status
