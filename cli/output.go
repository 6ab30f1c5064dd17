package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"
)

// Output formats for -o/--output.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

func validFormat(f string) error {
	switch f {
	case FormatTable, FormatJSON, FormatYAML:
		return nil
	}
	return &UsageError{fmt.Errorf("--output: unknown format %q (want table, json or yaml)", f)}
}

// render writes data in the chosen format; table draws the human view.
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
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if err := table(tw); err != nil {
			return err
		}
		return tw.Flush()
	}
}
