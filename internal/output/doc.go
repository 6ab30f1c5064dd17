// Package output renders command results for the CLIs (virt and
// virt-director): the same data as JSON, YAML or an aligned table, and
// TextOnly, the writer that keeps host-provided text from driving the
// operator's terminal.
//
// It knows no command and no flag library: each CLI validates its
// -o/--output value and words its own errors.
package output
