package cli

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestTableDropsTerminalControls: a host-provided name cannot drive the
// operator's terminal through the table view.
func TestTableDropsTerminalControls(t *testing.T) {
	var b strings.Builder
	err := render(&b, FormatTable, nil, func(w io.Writer) error {
		fmt.Fprintf(w, "NAME\tCLASS\n")
		fmt.Fprintf(w, "evil\x1b]0;pwned\x07\x1b[2J\u009b31m\tEXTERNAL\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, bad := range []string{"\x1b", "\x07", "\u009b"} {
		if strings.Contains(got, bad) {
			t.Errorf("table output keeps %q: %q", bad, got)
		}
	}
	if !strings.Contains(got, "evil]0;pwned[2J31m  EXTERNAL") {
		t.Errorf("table output lost its text or alignment: %q", got)
	}
}
