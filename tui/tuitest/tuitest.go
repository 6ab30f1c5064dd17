package tuitest

import (
	"strconv"
	"strings"
	"testing"
	"unicode"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/tui/term"
)

// GoldenTiers are the tiers every screen's goldens are taken in: colour
// (rich) and plain ASCII (a serial line).
var GoldenTiers = []term.Tier{term.Rich, term.Plain}

// RequireGolden checks a frame rendered in tier: exactly w x h cells
// (CheckSize), ASCII only in the plain tier (RequireASCII), and equal to
// its golden file, testdata/<test name>.golden (testutil.Golden; -update
// rewrites it).
func RequireGolden(t testing.TB, tier term.Tier, out string, w, h int) {
	t.Helper()
	CheckSize(t, out, w, h)
	if tier == term.Plain {
		RequireASCII(t, out)
	}
	testutil.Golden(t, out)
}

// CheckSize reports an error unless out is exactly h lines, each w cells
// wide as lipgloss measures them (escape sequences take no cells).
func CheckSize(t testing.TB, out string, w, h int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) != h {
		t.Errorf("got %d lines; want %d", len(lines), h)
	}
	for i, l := range lines {
		if got := lipgloss.Width(l); got != w {
			t.Errorf("line %d is %d cells wide; want %d: %q", i, got, w, l)
		}
	}
}

// RequireASCII stops the test at the first byte of out above 0x7E, naming
// the byte, its offset and the text around it. Control bytes (ESC and the
// escape sequences it starts included) are allowed: the plain tier may
// still move the cursor, it must not draw anything outside printable
// ASCII.
func RequireASCII(t testing.TB, out string) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		if c := out[i]; c > 0x7E {
			t.Fatalf("byte %#x at offset %d is above 0x7E: %q", c, i, out[max(i-20, 0):min(i+20, len(out))])
		}
	}
}

// named are the keys Key knows by name, each the Code a terminal reports
// for it. Only space types a character, so only it has a Text.
var named = map[string]rune{
	"enter":     tea.KeyEnter,
	"tab":       tea.KeyTab,
	"esc":       tea.KeyEscape,
	"space":     tea.KeySpace,
	"backspace": tea.KeyBackspace,
	"delete":    tea.KeyDelete,
	"up":        tea.KeyUp,
	"down":      tea.KeyDown,
	"left":      tea.KeyLeft,
	"right":     tea.KeyRight,
	"pgup":      tea.KeyPgUp,
	"pgdown":    tea.KeyPgDown,
	"home":      tea.KeyHome,
	"end":       tea.KeyEnd,
	"f1":        tea.KeyF1,
	"f2":        tea.KeyF2,
	"f3":        tea.KeyF3,
	"f4":        tea.KeyF4,
	"f5":        tea.KeyF5,
	"f6":        tea.KeyF6,
	"f7":        tea.KeyF7,
	"f8":        tea.KeyF8,
	"f9":        tea.KeyF9,
	"f10":       tea.KeyF10,
	"f11":       tea.KeyF11,
	"f12":       tea.KeyF12,
}

// modifiers are the prefixes Key accepts, in the order
// tea.KeyPressMsg.String writes them.
var modifiers = []struct {
	prefix string
	mod    tea.KeyMod
}{
	{"ctrl+", tea.ModCtrl},
	{"alt+", tea.ModAlt},
	{"shift+", tea.ModShift},
}

// Key is the key press a test means by name, and its String is that
// name:
//
//   - a named key ("enter", "esc", "tab", "backspace", "delete", "up",
//     "down", "left", "right", "pgup", "pgdown", "home", "end", "f1" to
//     "f12") is its Code alone;
//   - one printable character other than space ("a", "D", "/", "é") is
//     that rune as Code and the character as Text, as typed; space is
//     named "space" (the String of a typed space), not " ";
//   - "ctrl+", "alt+" and "shift+" (in that order) before a named key or
//     one character add the modifier, with no Text: "ctrl+c" is
//     {Code: 'c', Mod: tea.ModCtrl}, "shift+tab" is
//     {Code: tea.KeyTab, Mod: tea.ModShift}.
//
// Any other name is a mistake in the test, and Key panics on it rather
// than send a key the test did not mean.
func Key(name string) tea.KeyPressMsg {
	var mod tea.KeyMod
	base := name
	for _, m := range modifiers {
		if rest, ok := strings.CutPrefix(base, m.prefix); ok && rest != "" {
			mod |= m.mod
			base = rest
		}
	}
	var k tea.KeyPressMsg
	if code, ok := named[base]; ok {
		k = tea.KeyPressMsg{Code: code, Mod: mod}
		if code == tea.KeySpace && mod == 0 {
			k.Text = " "
		}
	} else if r := []rune(base); len(r) == 1 && mod != 0 {
		k = tea.KeyPressMsg{Code: r[0], Mod: mod}
	} else if len(r) == 1 && unicode.IsPrint(r[0]) {
		k = tea.KeyPressMsg{Code: r[0], Text: base}
	}
	if k.Code == 0 || k.String() != name {
		panic("tuitest: no key is named " + strconv.Quote(name))
	}
	return k
}

// Keys is Key of each name, in order.
func Keys(names ...string) []tea.KeyPressMsg {
	ks := make([]tea.KeyPressMsg, len(names))
	for i, n := range names {
		ks[i] = Key(n)
	}
	return ks
}

// Type is the key presses that type text, one per rune, each with the
// rune as Code and as Text (a space among them too, which Key calls
// "space").
func Type(text string) []tea.KeyPressMsg {
	var ks []tea.KeyPressMsg
	for _, r := range text {
		ks = append(ks, tea.KeyPressMsg{Code: r, Text: string(r)})
	}
	return ks
}
