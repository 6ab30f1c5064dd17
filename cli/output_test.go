package cli

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestTableDropsTerminalControls: virt's table view and its stderr status
// lines go through output's control-dropping writer (output's own tests
// cover the filter itself).
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
	fmt.Fprintf(textOnly{&b}, "virt: vm \"evil\x1b[2J\": not found\n")
	got := b.String()
	for _, bad := range []string{"\x1b", "\x07", "\u009b"} {
		if strings.Contains(got, bad) {
			t.Errorf("output keeps %q: %q", bad, got)
		}
	}
	for _, want := range []string{"evil]0;pwned[2J31m  EXTERNAL", "vm \"evil[2J\": not found"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lost its text or alignment, want %q: %q", want, got)
		}
	}
}
