// Package reexec is the one registry of virtcon's child modes: jobs that a
// virtcon program runs by starting its own executable again (the KVM
// probe, a network try's watchdog, the management interface's DHCP client,
// a PAM transaction), so that what could hang, crash, leak or must outlive
// the caller does it in a process of its own.
//
// The package that starts a child registers its mode in init() and starts
// it with Command; every program's main, and the TestMain of every test
// binary that re-executes itself, calls Init first thing. Nothing else
// lists the modes: a program that links the package that starts a child
// also links its registration.
//
// It imports neither cobra nor Bubble Tea, and carries no data of a mode:
// each mode passes its own parameters (environment variables, stdin, extra
// descriptors) and keeps its own rules about what may be seen in argv and
// in the environment (a PAM password goes on stdin only).
package reexec
