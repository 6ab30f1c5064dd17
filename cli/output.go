package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/virtcon/virtcon/internal/output"
)

// Output formats for -o/--output.
const (
	FormatTable = output.Table
	FormatJSON  = output.JSON
	FormatYAML  = output.YAML
	// FormatWide is the table with more columns, for the commands that
	// have them (annotationWide); elsewhere it is refused.
	FormatWide = output.Wide
)

// annotationWide marks a command whose table has a wide form.
const annotationWide = "virtcon.io/output-wide"

func validFormat(f string) error {
	switch f {
	case FormatTable, FormatJSON, FormatYAML, FormatWide:
		return nil
	}
	return &UsageError{fmt.Errorf("--output: unknown format %q (want table, wide, json or yaml)", f)}
}

// render writes data in the chosen format; table draws the human view
// (and wide, which the table function widens itself).
func render(w io.Writer, format string, data any, table func(w io.Writer) error) error {
	return output.Render(w, format, data, table)
}

// textOnly is output.TextOnly as a value, for the status lines that print
// host-provided text (VM names, errors) to stderr.
type textOnly struct{ w io.Writer }

func (t textOnly) Write(p []byte) (int, error) { return output.TextOnly(t.w).Write(p) }

// count prints a number, or "-" when it is unknown (zero).
func count(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// mib prints a memory size in MiB, or "-" when it is unknown (zero).
func mib(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n) + "MiB"
}

// renderStreamed writes one item of a stream (vm events, vm stats
// --watch): a JSON line, or a YAML document with "---" between documents.
// It reports false, writing nothing, for the table, which each stream
// draws its own way.
func renderStreamed(w io.Writer, format string, v any, first bool) (bool, error) {
	switch format {
	case FormatJSON:
		b, err := json.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return true, err
	case FormatYAML:
		if !first {
			fmt.Fprintln(w, "---")
		}
		return true, render(w, FormatYAML, v, nil)
	}
	return false, nil
}
