package common

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
)

// Clean makes host-provided text safe to draw on one line: a VM name from
// any process's argv, a NIC or file name, a log line, an error that quotes
// them. Escape sequences and control characters are removed (so the text
// cannot move the cursor, retitle the terminal or recolour the screen), as
// are invalid UTF-8 and invisible format characters such as bidi
// overrides (so it cannot pretend to say something else); newlines and
// tabs become spaces. With ascii (the plain tier), every character beyond
// 0x7E becomes '?', so the plain tier stays ASCII whatever the host says.
func Clean(s string, ascii bool) string {
	if isSafe(s) {
		return s
	}
	s = ansi.Strip(s)
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r = cleanRune(r, ascii); r >= 0 {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// cleanRune is r as Clean draws it, or -1 to drop it.
func cleanRune(r rune, ascii bool) rune {
	switch {
	case r == '\n' || r == '\t' || r == '\u2028' || r == '\u2029':
		return ' '
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return -1
	case r == utf8.RuneError || unicode.Is(unicode.Cf, r):
		return -1
	case ascii && r > 0x7e:
		return '?'
	}
	return r
}

// isSafe reports that s is printable ASCII, which Clean returns as it is
// without allocating: the common case.
func isSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
