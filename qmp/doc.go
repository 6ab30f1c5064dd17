// Package qmp is virtcon's client for the QEMU Machine Protocol (QMP): it
// connects to a qemu-system monitor socket, negotiates capabilities, runs
// commands with deadlines, and reads asynchronous events.
//
// It owns the wire: the greeting and qmp_capabilities handshake, matching
// replies to commands by id, draining events that QEMU interleaves with
// replies, and turning the ways a monitor fails (no socket, another client
// holding it, no reply in time, QEMU going away) into sentinel errors that
// callers can branch on: [ErrUnavailable], [ErrBusy], [ErrTimeout],
// [ErrClosed], and [*CommandError] for errors QEMU itself reports.
//
// It exists because github.com/digitalocean/go-qemu's SocketMonitor has no
// timeouts, cannot read replies larger than 64 KiB, and stops answering
// commands when nobody drains its event channel. [Monitor] implements
// go-qemu's qmp.Monitor interface, so go-qemu's typed layers (raw.Monitor,
// qemu.Domain) still work on top of it; virtcon itself uses the
// context-aware methods ([Monitor.Execute] and the typed helpers).
//
// A QMP socket serves one client at a time: a second client is accepted but
// gets no greeting until the first disconnects, which [Dial] reports as
// [ErrBusy]. Events are best read on a second socket with [DialEvents] so
// that a slow event consumer can never delay command replies.
//
// The package must not know about VM specs, state directories or how QEMU
// is launched: callers pass a socket path and get a monitor back. It never
// logs command arguments, which can hold secrets; only command names and
// durations.
package qmp
