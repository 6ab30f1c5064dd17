//go:build cgo

package auth

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/msteinert/pam/v2"
)

func TestConversation(t *testing.T) {
	c := &conversation{user: "alice", password: "pw"}
	tests := []struct {
		style   pam.Style
		msg     string
		want    string
		wantErr bool
	}{
		{pam.PromptEchoOff, "Password: ", "pw", false},
		{pam.PromptEchoOn, "login: ", "alice", false},
		{pam.TextInfo, "  Your password will expire in 3 days.\n", "", false},
		{pam.ErrorMsg, "Account locked", "", false},
		{pam.ErrorMsg, "   ", "", false}, // blank: not kept
		{pam.BinaryPrompt, "", "", true},
	}
	for _, tt := range tests {
		got, err := c.respond(tt.style, tt.msg)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("respond(%d, %q) = %q, %v; want %q (error %v)", tt.style, tt.msg, got, err, tt.want, tt.wantErr)
		}
	}
	want := []string{"Your password will expire in 3 days.", "Account locked"}
	if strings.Join(c.messages, "|") != strings.Join(want, "|") {
		t.Errorf("messages = %q; want %q", c.messages, want)
	}
	for range 2 * maxPAMMessages {
		c.respond(pam.TextInfo, strings.Repeat("x", 3*maxPAMMessageLn))
	}
	if len(c.messages) != maxPAMMessages {
		t.Errorf("%d messages kept; want at most %d", len(c.messages), maxPAMMessages)
	}
	for _, m := range c.messages {
		if len(m) > maxPAMMessageLn+3 {
			t.Errorf("message of %d bytes kept; want at most %d", len(m), maxPAMMessageLn+3)
		}
	}
}

func TestClassifyPAM(t *testing.T) {
	tests := []struct {
		step   string
		status error
		want   error // ErrBadCredentials, ErrAccount, or nil for a stack failure
	}{
		{"authenticate", pam.ErrAuth, ErrBadCredentials},
		{"authenticate", pam.ErrUserUnknown, ErrBadCredentials},
		{"authenticate", pam.ErrMaxtries, ErrBadCredentials},
		{"authenticate", pam.ErrAuthinfoUnavail, nil},
		{"authenticate", pam.ErrSystem, nil},
		{"authenticate", pam.ErrAcctExpired, nil},
		{"account", pam.ErrAcctExpired, ErrAccount},
		{"account", pam.ErrNewAuthtokReqd, ErrAccount},
		{"account", pam.ErrAuthtokExpired, ErrAccount},
		{"account", pam.ErrPermDenied, ErrAccount},
		{"account", pam.ErrSystem, nil},
		{"account", errors.New("not a PAM status"), nil},
	}
	for _, tt := range tests {
		err := classifyPAM(tt.step, tt.status, []string{"module says hi"})
		for _, kind := range []error{ErrBadCredentials, ErrAccount} {
			if got, want := errors.Is(err, kind), kind == tt.want; got != want {
				t.Errorf("classifyPAM(%s, %v): errors.Is(%v) = %v; want %v", tt.step, tt.status, kind, got, want)
			}
		}
		if !errors.Is(err, tt.status) {
			t.Errorf("classifyPAM(%s, %v) = %v; want it to wrap the PAM status", tt.step, tt.status, err)
		}
		if !strings.Contains(err.Error(), "module says hi") {
			t.Errorf("classifyPAM(%s, %v) = %q; want the modules' messages in it", tt.step, tt.status, err)
		}
	}
}

func TestRealPAMDoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := realPAM(ctx, "virtcon-test-never-installed", "alice", "pw", "tty1")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("realPAM with a done context = %v; want context.Canceled", err)
	}
}

// TestPAMItems: a web login's transaction tells PAM where it comes from
// (PAM_RHOST, for pam_access and fail2ban); a console's names only its tty.
func TestPAMItems(t *testing.T) {
	tests := []struct {
		tty  string
		want map[pam.Item]string
	}{
		{"tty1", map[pam.Item]string{pam.Tty: "tty1"}},
		{"pts/3", map[pam.Item]string{pam.Tty: "pts/3"}},
		{WebTTY("192.0.2.7"), map[pam.Item]string{pam.Tty: "web:192.0.2.7", pam.Rhost: "192.0.2.7"}},
		{WebTTY("2001:db8::5"), map[pam.Item]string{pam.Tty: "web:2001:db8::5", pam.Rhost: "2001:db8::5"}},
		{"", map[pam.Item]string{}},
	}
	for _, tt := range tests {
		got := map[pam.Item]string{}
		for _, it := range pamItems(tt.tty) {
			got[it.item] = it.value
		}
		if !maps.Equal(got, tt.want) {
			t.Errorf("pamItems(%q) = %v; want %v", tt.tty, got, tt.want)
		}
	}
}
