// Package systemd talks to systemd's manager, where systemd is PID 1:
// each VM's QEMU goes into a transient scope of its own
// (virtcon-vm-<uid>.scope under virtcon.slice), so that no console, web
// terminal or agent unit takes a VM down when it stops, and the host's
// shutdown stops virtcon-guests.service (which shuts the guests down)
// before it stops the scopes.
//
// It owns the D-Bus calls (StartTransientUnit), the unit names and the
// properties every scope gets, and the question "does systemd run here?".
// It must not start, stop or kill a unit other than the scopes it makes,
// nor run without a caller asking: no goroutine outlives a call.
package systemd
