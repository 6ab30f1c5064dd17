package dcui

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/auth"
)

// --idle-timeout takes what every virtcon duration flag takes, bare
// seconds included, and only a positive value.
func TestIdleTimeoutFlag(t *testing.T) {
	tests := []struct {
		args    []string
		want    time.Duration
		wantErr string
	}{
		{nil, auth.DefaultIdleTimeout, ""},
		{[]string{"--idle-timeout", "30"}, 30 * time.Second, ""},
		{[]string{"--idle-timeout=1.5"}, 1500 * time.Millisecond, ""},
		{[]string{"--idle-timeout", "90s"}, 90 * time.Second, ""},
		{[]string{"--idle-timeout", "10m"}, 10 * time.Minute, ""},
		{[]string{"--idle-timeout", "0"}, 0, "--idle-timeout 0s: must be positive"},
		{[]string{"--idle-timeout", "0s"}, 0, "must be positive"},
		{[]string{"--idle-timeout", "-5"}, 0, "must not be negative"},
		{[]string{"--idle-timeout", "five"}, 0, `"five" is not a duration`},
		{[]string{"--idle-timeout", "1e3"}, 0, "is not a duration"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			f, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags(%q) = %+v, %v; want an error with %q", tt.args, f, err, tt.wantErr)
				}
				return
			}
			if err != nil || f.IdleTimeout != tt.want {
				t.Fatalf("parseFlags(%q) = %+v, %v; want --idle-timeout %v", tt.args, f, err, tt.want)
			}
		})
	}
}

// The help names the default as the flag package has it.
func TestIdleTimeoutHelp(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags([]string{"-h"}, &out); err == nil {
		t.Fatal("-h: no error; want flag.ErrHelp")
	}
	if !strings.Contains(out.String(), "-idle-timeout") || !strings.Contains(out.String(), "(default "+auth.DefaultIdleTimeout.String()+")") {
		t.Errorf("help lacks --idle-timeout with its default:\n%s", out.String())
	}
}
