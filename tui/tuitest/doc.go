// Package tuitest holds the checks the DCUI's tests share: the exact size
// of a rendered screen, ASCII-only output in the plain tier, a frame
// against its golden file in the tiers goldens are taken in, and key
// presses built from their names. What is not about a terminal (the
// golden file itself, loggers, root checks, fake hosts) is
// internal/testutil's, which this package uses.
//
// It is a normal package only so that the tests of every tui package can
// import it; it is imported by _test.go files alone and never by the
// program.
package tuitest
