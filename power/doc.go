// Package power reboots and powers off the host. It owns the choice of
// command (systemctl on a systemd host, else reboot/poweroff from PATH) and
// running it, argv only, never through a shell.
//
// It does not stop VMs first: each VM is its own QEMU process, and the
// callers (`virt host reboot`, the DCUI's Power screen) warn the operator
// about running VMs before they call here. Tests never call Reboot or
// PowerOff; they test the command choice through Command. It imports
// neither cobra nor Bubble Tea.
package power
