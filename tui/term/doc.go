// Package term decides how much a console can render: the tier (colours,
// border glyphs, redraw rate) and the size to lay out for. Everything here
// is a pure function of strings the caller reads, so it is tested without
// a terminal.
//
// It reads no environment variable and opens no terminal itself, and
// imports no Bubble Tea.
package term
