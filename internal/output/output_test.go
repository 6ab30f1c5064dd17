package output

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestTableDropsTerminalControls: a host-provided name cannot drive the
// operator's terminal through the table view.
func TestTableDropsTerminalControls(t *testing.T) {
	var b strings.Builder
	err := Render(&b, Table, nil, func(w io.Writer) error {
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

func TestTextOnly(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "web-01\n", "web-01\n"},
		{"tab and newline kept", "a\tb\nc", "a\tb\nc"},
		{"C0 and DEL dropped", "a\x00\x1b\r\x7fb", "ab"},
		{"C1 in UTF-8 dropped", "a\u0080\u009bb", "ab"},
		{"other UTF-8 kept", "é\u00a0ü", "é\u00a0ü"},
		{"lone 0xc2 at the end kept", "a\xc2", "a\xc2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			n, err := TextOnly(&b).Write([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tt.in) {
				t.Errorf("Write returned %d; want %d (the input length)", n, len(tt.in))
			}
			if got := b.String(); got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestTextOnlyPassesErrors(t *testing.T) {
	if _, err := TextOnly(failWriter{}).Write([]byte("x")); err == nil {
		t.Fatal("got no error from a failing writer")
	}
}

func TestRender(t *testing.T) {
	data := map[string]any{"name": "web-01", "vcpus": 2}
	tests := []struct {
		format, want string
	}{
		{JSON, "{\n  \"name\": \"web-01\",\n  \"vcpus\": 2\n}\n"},
		{YAML, "name: web-01\nvcpus: 2\n"},
		{Table, "NAME    VCPUS\nweb-01  2\n"},
		{Wide, "NAME    VCPUS\nweb-01  2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var b strings.Builder
			err := Render(&b, tt.format, data, func(w io.Writer) error {
				fmt.Fprintf(w, "NAME\tVCPUS\n%s\t%d\n", data["name"], data["vcpus"])
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}

func TestRenderTableError(t *testing.T) {
	want := errors.New("boom")
	err := Render(io.Discard, Table, nil, func(io.Writer) error { return want })
	if !errors.Is(err, want) {
		t.Fatalf("got %v; want %v", err, want)
	}
}
