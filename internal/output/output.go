package output

import (
	"encoding/json"
	"io"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"
)

// Output formats for -o/--output.
const (
	Table = "table"
	JSON  = "json"
	YAML  = "yaml"
	// Wide is the table with more columns, for the commands that have
	// them; Render draws it with the same table function, which widens
	// itself.
	Wide = "wide"
)

// Render writes data in format: JSON or YAML indented by two spaces, and
// for any other format (table, wide) the human view that table draws,
// aligned in columns, with terminal controls dropped (TextOnly).
func Render(w io.Writer, format string, data any, table func(w io.Writer) error) error {
	switch format {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(data)
	case YAML:
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(data); err != nil {
			return err
		}
		return enc.Close()
	default:
		tw := tabwriter.NewWriter(TextOnly(w), 0, 4, 2, ' ', 0)
		if err := table(tw); err != nil {
			return err
		}
		return tw.Flush()
	}
}

// TextOnly returns a writer that passes text to w and drops terminal
// controls: the table view prints host-provided strings (the name of an
// EXTERNAL VM is any process's argv, a node's hostname is what the node
// says), which must not move the cursor, retitle or recolour the
// operator's terminal. It drops C0 controls except tab and newline, DEL,
// and C1 controls in UTF-8 (U+0080-U+009F, which some terminals obey as
// CSI). JSON and YAML escape these themselves.
func TextOnly(w io.Writer) io.Writer { return textOnly{w} }

type textOnly struct{ w io.Writer }

// Write reports len(p) written when the cleaned text was, so that callers
// (fmt, tabwriter) do not take the dropped bytes for a short write.
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
