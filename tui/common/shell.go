package common

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// ShellQuote quotes s for a CLI line on screen ("virt vm start 'my vm'")
// when it holds anything beyond the characters names and paths usually
// use, so the line can be copied into a shell as it is.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.:@/+,=", r)))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
