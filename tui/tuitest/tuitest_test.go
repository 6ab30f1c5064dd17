package tuitest

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/tui/term"
)

func TestCheckSize(t *testing.T) {
	if r := testutil.Record(t, func(tb testing.TB) { CheckSize(tb, "ab\n\x1b[1mcd\x1b[0m\n✓ ", 2, 3) }); len(r.Errors) != 0 {
		t.Errorf("a 2x3 screen failed: %q", r.Errors)
	}
	r := testutil.Record(t, func(tb testing.TB) { CheckSize(tb, "abc\nab", 2, 3) })
	if r.Fatal || len(r.Errors) != 2 || !strings.Contains(r.Errors[0], "got 2 lines; want 3") || !strings.Contains(r.Errors[1], "line 0 is 3 cells wide; want 2") {
		t.Errorf("got %q (fatal %v); want the line count and line 0 reported, not fatally", r.Errors, r.Fatal)
	}
}

func TestRequireASCII(t *testing.T) {
	if r := testutil.Record(t, func(tb testing.TB) { RequireASCII(tb, "\x1b[1m+--+\x1b[0m\r\n\t~\x00") }); len(r.Errors) != 0 {
		t.Errorf("ASCII with control bytes failed: %q", r.Errors)
	}
	r := testutil.Record(t, func(tb testing.TB) { RequireASCII(tb, "ok ✓ \x7f") })
	if !r.Fatal || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "byte 0xe2 at offset 3") {
		t.Errorf("got %q (fatal %v); want one fatal report of byte 0xe2 at offset 3", r.Errors, r.Fatal)
	}
	r = testutil.Record(t, func(tb testing.TB) { RequireASCII(tb, "ok\x7f") })
	if !r.Fatal || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "byte 0x7f at offset 2") {
		t.Errorf("got %q (fatal %v); want DEL reported", r.Errors, r.Fatal)
	}
}

// TestRequireGolden: the size, the plain tier's ASCII and the golden file
// are each checked, in a temp directory with its own golden file.
func TestRequireGolden(t *testing.T) {
	if f := flag.Lookup("update"); f == nil || f.Value.String() == "true" {
		t.Skip("-update writes every golden file: nothing could differ")
	}
	t.Chdir(t.TempDir())
	const frame = "+-+\n|\u2713|\n+-+"
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "TestRequireGolden.golden"), []byte(frame), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := testutil.Record(t, func(tb testing.TB) { RequireGolden(tb, term.Rich, frame, 3, 3) }); r.Fatal || len(r.Errors) != 0 {
		t.Errorf("the golden frame in the rich tier: got %+v; want it to pass", r)
	}
	if r := testutil.Record(t, func(tb testing.TB) { RequireGolden(tb, term.Plain, frame, 3, 3) }); !r.Fatal || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "above 0x7E") {
		t.Errorf("a non-ASCII frame in the plain tier: got %+v; want it stopped there", r)
	}
	if r := testutil.Record(t, func(tb testing.TB) { RequireGolden(tb, term.Rich, frame, 4, 3) }); len(r.Errors) != 3 || r.Fatal {
		t.Errorf("the golden frame checked at the wrong size: got %+v; want 3 size errors, not fatal", r)
	}
	if r := testutil.Record(t, func(tb testing.TB) { RequireGolden(tb, term.Rich, "+-+\n| |\n+-+", 3, 3) }); !r.Fatal || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "output does not match") {
		t.Errorf("another frame of the right size: got %+v; want the golden mismatch", r)
	}
}

// TestKey pins the messages the tui tests sent before they shared Key.
func TestKey(t *testing.T) {
	for name, want := range map[string]tea.KeyPressMsg{
		"enter":     {Code: tea.KeyEnter},
		"esc":       {Code: tea.KeyEscape},
		"tab":       {Code: tea.KeyTab},
		"shift+tab": {Code: tea.KeyTab, Mod: tea.ModShift},
		"backspace": {Code: tea.KeyBackspace},
		"delete":    {Code: tea.KeyDelete},
		"up":        {Code: tea.KeyUp},
		"down":      {Code: tea.KeyDown},
		"left":      {Code: tea.KeyLeft},
		"right":     {Code: tea.KeyRight},
		"pgup":      {Code: tea.KeyPgUp},
		"pgdown":    {Code: tea.KeyPgDown},
		"home":      {Code: tea.KeyHome},
		"end":       {Code: tea.KeyEnd},
		"f2":        {Code: tea.KeyF2},
		"f10":       {Code: tea.KeyF10},
		"ctrl+c":    {Code: 'c', Mod: tea.ModCtrl},
		"ctrl+s":    {Code: 's', Mod: tea.ModCtrl},
		"space":     {Code: ' ', Text: " "},
		"a":         {Code: 'a', Text: "a"},
		"D":         {Code: 'D', Text: "D"},
		"/":         {Code: '/', Text: "/"},
		"-":         {Code: '-', Text: "-"},
		"é":         {Code: 'é', Text: "é"},
	} {
		if got := Key(name); got != want {
			t.Errorf("Key(%q) = %#v; want %#v", name, got, want)
		}
	}
}

func TestKeyStringIsName(t *testing.T) {
	names := []string{"space", "ctrl+space", "alt+x", "ctrl+alt+shift+up", "+", "~", "0", "Z"}
	for name := range named {
		names = append(names, name, "ctrl+"+name, "shift+"+name)
	}
	for _, name := range names {
		if got := Key(name).String(); got != name {
			t.Errorf("Key(%q).String() = %q", name, got)
		}
	}
	if got, want := Keys("j", "enter"), []tea.KeyPressMsg{Key("j"), Key("enter")}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Keys = %#v; want %#v", got, want)
	}
}

func TestKeyRefusesUnknownNames(t *testing.T) {
	for _, name := range []string{"", " ", "pgdn", "F1", "ctrl+", "shift+ctrl+a", "ab", "\x1b", "enter+a"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Key(%q) did not panic", name)
				}
			}()
			Key(name)
		}()
	}
}

func TestType(t *testing.T) {
	got := Type("a b\u00e9")
	want := []tea.KeyPressMsg{Key("a"), Key("space"), Key("b"), Key("é")}
	if len(got) != len(want) {
		t.Fatalf("Type = %#v; want %#v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Type[%d] = %#v; want %#v", i, got[i], want[i])
		}
	}
}
