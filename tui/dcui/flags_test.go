package dcui

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/tui/app"
	"github.com/virtcon/virtcon/tui/term"
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

// --repaint: auto (the tier's default), off, or a period of at least a
// second; VIRTCON_DCUI_REPAINT sets its default.
func TestRepaintFlag(t *testing.T) {
	tests := []struct {
		env     string
		args    []string
		want    time.Duration
		wantErr string
	}{
		{args: nil, want: 0},
		{args: []string{"--repaint", "auto"}, want: 0},
		{args: []string{"--repaint", "off"}, want: -1},
		{args: []string{"--repaint", "0"}, want: -1},
		{args: []string{"--repaint", "2"}, want: 2 * time.Second},
		{args: []string{"--repaint=30s"}, want: 30 * time.Second},
		{args: []string{"--repaint", "500ms"}, wantErr: "want at least 1s"},
		{args: []string{"--repaint", "often"}, wantErr: `"often" is not a duration`},
		{env: "3s", want: 3 * time.Second},
		{env: "3s", args: []string{"--repaint", "off"}, want: -1},
		{env: "soon", wantErr: `VIRTCON_DCUI_REPAINT="soon"`},
	}
	for _, tt := range tests {
		t.Run(tt.env+" "+strings.Join(tt.args, " "), func(t *testing.T) {
			t.Setenv(EnvRepaint, tt.env)
			f, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags(%q) = %+v, %v; want an error with %q", tt.args, f, err, tt.wantErr)
				}
				return
			}
			if err != nil || f.Repaint != tt.want {
				t.Fatalf("parseFlags(%q) = %+v, %v; want --repaint %v", tt.args, f, err, tt.want)
			}
		})
	}
}

func TestRepaintPeriod(t *testing.T) {
	tests := []struct {
		tier          term.Tier
		kernelConsole bool
		flag          time.Duration
		want          time.Duration
	}{
		{term.Plain, false, 0, app.DefaultRepaint},
		{term.Linux, false, 0, 0},
		{term.Linux, true, 0, app.DefaultRepaint}, // tty1, where the kernel prints
		{term.Rich, false, 0, 0},
		{term.Plain, true, -1, 0},
		{term.Rich, false, 2 * time.Second, 2 * time.Second},
	}
	for _, tt := range tests {
		if got := repaintPeriod(tt.tier, tt.kernelConsole, tt.flag); got != tt.want {
			t.Errorf("repaintPeriod(%s, %v, %v) = %v; want %v", tt.tier, tt.kernelConsole, tt.flag, got, tt.want)
		}
	}
}
