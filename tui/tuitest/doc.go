// Package tuitest holds the checks the DCUI's tests share: the exact size
// of a rendered screen, ASCII-only output in the plain tier, and key
// presses built from their names.
//
// It is a normal package only so that the tests of every tui package can
// import it; it is imported by _test.go files alone and never by the
// program.
package tuitest
