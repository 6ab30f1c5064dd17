#!/bin/sh
# acpid's handler for the ACPI power button (PWRF) in virtcon's test guest: say so, power off.
# A newline first: the console shell's prompt may be pending on the line.
printf '\nVIRTCON-POWEROFF\n' >"${VIRTCON_TTY:-/dev/console}"
sync
poweroff -f
