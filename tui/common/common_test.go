package common

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/tui/styles"
	"github.com/virtcon/virtcon/tui/term"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		ascii bool
		want  string
	}{
		{"empty", "", false, ""},
		{"plain", "web-01", true, "web-01"},
		{"sgr", "\x1b[0;1;32mOK\x1b[0m done", false, "OK done"},
		{"cursor moves", "\x1b[2J\x1b[Hlogin:", false, "login:"},
		{"osc title", "\x1b]0;web-01\x07prompt$", false, "prompt$"},
		{"8-bit csi", "x\x9b31my", false, "xy"},
		{"c1 control as utf-8", "x\xc2\x9by", false, "xy"},
		{"controls", "a\x00b\x07c\x08d\x7fe\r", false, "abcde"},
		{"newline and tab", "a\nb\tc", false, "a b c"},
		{"line separator", "evil\u2028name", false, "evil name"},
		{"bidi override", "abc\u202edcb.exe", false, "abcdcb.exe"},
		{"zero width", "we\u200bb-01", false, "web-01"},
		{"invalid utf-8", "bad\xff\xfebytes", false, "badbytes"},
		{"unicode kept", "caf\u00e9 \u4e16", false, "caf\u00e9 \u4e16"},
		{"unicode ascii", "caf\u00e9 \u4e16", true, "caf? ?"},
		{"escape in plain", "evil\x1b[31mred", true, "evilred"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Clean(tt.in, tt.ascii); got != tt.want {
				t.Errorf("Clean(%q, %v) = %q; want %q", tt.in, tt.ascii, got, tt.want)
			}
		})
	}
}

func TestConfirmed(t *testing.T) {
	tests := []struct {
		msg  tea.KeyPressMsg
		want bool
	}{
		{tea.KeyPressMsg{Code: 'y', Text: "y"}, true},
		{tea.KeyPressMsg{Code: 'y', ShiftedCode: 'Y', Text: "Y", Mod: tea.ModShift}, true},
		{tea.KeyPressMsg{Code: tea.KeyEnter}, false},
		{tea.KeyPressMsg{Code: 'n', Text: "n"}, false},
		{tea.KeyPressMsg{Code: tea.KeyEscape}, false},
		{tea.KeyPressMsg{Code: tea.KeyTab}, false},
		{tea.KeyPressMsg{Code: 'z', Text: "z"}, false},
	}
	for _, tt := range tests {
		if got := Confirmed(tt.msg); got != tt.want {
			t.Errorf("Confirmed(%q) = %v; want %v", tt.msg.String(), got, tt.want)
		}
	}
}

func TestConfirmWording(t *testing.T) {
	s := styles.New(term.Plain)
	if got, want := ansi.Strip(ConfirmPrompt(s, "delete web-01")), "Press y to delete web-01; any other key cancels."; got != want {
		t.Errorf("ConfirmPrompt = %q; want %q", got, want)
	}
	h := ConfirmHelp("delete")
	if len(h) != 2 || h[0].Help().Key != "y" || !strings.Contains(h[1].Help().Key, "any other key") {
		t.Errorf("ConfirmHelp = %+v; want y and any other key", h)
	}
}

func TestFit(t *testing.T) {
	got := Fit([]string{"abcdef", "x\ny"}, 4, 3, "~")
	if want := "abc~\nx y \n    "; got != want {
		t.Errorf("Fit = %q; want %q", got, want)
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"web-01", "web-01"},
		{"/var/log/virtcon/dcui.log", "/var/log/virtcon/dcui.log"},
		{"", "''"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"$(reboot)", "'$(reboot)'"},
		{"caf\u00e9", "'caf\u00e9'"},
	}
	for _, tt := range tests {
		if got := ShellQuote(tt.in); got != tt.want {
			t.Errorf("ShellQuote(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
