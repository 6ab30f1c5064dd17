// Package duration reads the durations operators type: Go's own form
// (90s, 2m, 1h30m) and bare seconds (30, 1.5), as Incus and Proxmox take
// them. Every virtcon program's duration flags use it.
//
// It parses only: the limits of a particular flag (positive, a minimum)
// are its caller's, and it imports neither cobra nor pflag (Value fits
// both through their shared interface).
package duration
