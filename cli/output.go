package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"
)

// Output formats for -o/--output.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
	// FormatWide is the table with more columns, for the commands that
	// have them (annotationWide); elsewhere it is refused.
	FormatWide = "wide"
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
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(data)
	case FormatYAML:
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(data); err != nil {
			return err
		}
		return enc.Close()
	default:
		tw := tabwriter.NewWriter(textOnly{w}, 0, 4, 2, ' ', 0)
		if err := table(tw); err != nil {
			return err
		}
		return tw.Flush()
	}
}

// textOnly passes text and drops terminal controls: the table view prints
// host-provided strings (the name of an EXTERNAL VM is any process's argv),
// which must not move the cursor, retitle or recolour the operator's
// terminal. It drops C0 controls except tab and newline, DEL, and C1
// controls in UTF-8 (U+0080-U+009F, which some terminals obey as CSI).
// JSON and YAML escape these themselves.
type textOnly struct{ w io.Writer }

func (t textOnly) Write(p []byte) (int, error) {
	clean := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\t' || c == '\n':
		case c < 0x20 || c == 0x7f:
			continue
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			i++
			continue
		}
		clean = append(clean, c)
	}
	if _, err := t.w.Write(clean); err != nil {
		return 0, err
	}
	return len(p), nil
}

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
