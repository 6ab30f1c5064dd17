// Package cli is the `virt` command line: cobra commands, flags, output
// rendering (table, JSON, YAML) and exit codes. It is an adapter over the
// core packages and holds no host logic of its own.
//
// It reaches the host only through the core (the services of host.Host,
// built once per invocation by Env.Host, and the core's own types): it
// never talks to QEMU, QMP or netlink itself and never imports a tui
// package. The core's typed errors get their words here, and their exit
// codes in the one switch of exitcode.go; data goes to stdout, progress
// and status to stderr.
package cli
