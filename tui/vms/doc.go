// Package vms is the DCUI's virtual machines screen: the list `virt vm
// list` prints (name, class, phase, accel, pid, vCPUs, memory, uid), a
// cursor over it, and the lifecycle actions on the selected VM: start,
// stop (ACPI), force stop, reboot, delete (after a confirmation) and the
// serial console, run full-screen through the `virt vm console` command.
//
// It owns the screen's layout, its key bindings (none of the global
// letters), the action menu and the confirmation dialog. It does not own
// VM logic: every action is one call on a Manager (vm.Manager satisfies
// it) made from a tea.Cmd with a timeout, so Update never blocks, and its
// error is shown as the core wrote it. It must not act on EXTERNAL or
// ORPHANED entries, nor act at all when the console is read-only.
package vms
