// Package fielderr formats virtcon's admission errors the same way
// everywhere: each problem names the offending field and value, and one
// error carries every problem found, so a single run shows them all.
package fielderr

import (
	"fmt"
	"strconv"
	"strings"
)

// Format renders one problem: "spec.cpus: must be at least 1 (got -1)".
// A nil value is left out.
func Format(field string, value any, msg string) string {
	if value == nil {
		return fmt.Sprintf("%s: %s", field, msg)
	}
	return fmt.Sprintf("%s: %s (got %s)", field, msg, quote(value))
}

func quote(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// Join renders a list of problems after kind's message, e.g.
// "invalid virtual machine: spec.cpus: ...; spec.memoryMiB: ...".
func Join(kind error, problems []string) string {
	return kind.Error() + ": " + strings.Join(problems, "; ")
}
