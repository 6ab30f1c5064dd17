// Package proc reads what Linux's /proc says about a process, so that a
// record naming a process (a network try's watchdog, the web terminal)
// can tell that process from a later one given the same PID: a PID is
// reused, a PID with its start time within one boot is not. It only
// reads; it never signals or changes a process.
package proc
