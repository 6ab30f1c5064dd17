// Package dcui wires the DCUI: a session (Run) is the terminal tier, the
// core (host.Host: VMs, network, host info, power, diagnostics, auth)
// behind each screen, and the Bubble Tea program, on whatever terminal
// its host hands it; Main is the host console's: flags, the log file and
// the signals around one Run. cmd/dcui is a thin main over Main.
//
// It holds no screen's logic and no host rule: it builds the host's
// services once (host.New) and hands each screen its Sources.
package dcui
