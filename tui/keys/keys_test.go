package keys

import (
	"strings"
	"testing"
	"unicode"
)

// TestEveryFunctionKeyHasLetterAlias: a console that drops F-keys must
// still reach every action, and the legend must say how.
func TestEveryFunctionKeyHasLetterAlias(t *testing.T) {
	for _, b := range Default().All() {
		ks := b.Keys()
		hasF, hasLetter := false, false
		for _, k := range ks {
			if len(k) >= 2 && k[0] == 'f' && unicode.IsDigit(rune(k[1])) {
				hasF = true
			}
			if len(k) == 1 || strings.HasPrefix(k, "ctrl+") {
				hasLetter = true
			}
		}
		if hasF && !hasLetter {
			t.Errorf("binding %v has a function key but no letter alias", ks)
		}
		if hasF && !strings.Contains(b.Help().Key, "/") {
			t.Errorf("binding %v: legend %q does not show the alias", ks, b.Help().Key)
		}
	}
}

// TestOnHelp: a binding built with On(...).Help(...) is pressed by its
// keys and shows its legend, as key.NewBinding would make it.
func TestOnHelp(t *testing.T) {
	b := On("down", "j").Help("down/j", "scroll")
	if got := b.Keys(); len(got) != 2 || got[0] != "down" || got[1] != "j" {
		t.Errorf("keys %q; want [down j]", got)
	}
	if h := b.Help(); h.Key != "down/j" || h.Desc != "scroll" {
		t.Errorf("help %q %q; want \"down/j\" \"scroll\"", h.Key, h.Desc)
	}
	if !b.Enabled() {
		t.Error("binding disabled; want enabled")
	}
}
