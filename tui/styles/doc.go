// Package styles holds every lipgloss style of the DCUI, one set per
// terminal tier. Components take a *Styles and never build their own, so
// a tier's limits (no colour, ASCII only) hold everywhere at once.
//
// It holds styles only: no layout, no text and no I/O.
package styles
