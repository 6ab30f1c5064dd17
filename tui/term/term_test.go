package term

import "testing"

func TestDetect(t *testing.T) {
	tests := []struct {
		name, term, tty, override string
		want                      Tier
	}{
		{"xterm-256color", "xterm-256color", "/dev/pts/0", "", Rich},
		{"tmux", "tmux-256color", "/dev/pts/3", "", Rich},
		{"linux vt", "linux", "/dev/tty1", "", Linux},
		{"vt100", "vt100", "", "", Plain},
		{"vt102", "vt102", "", "", Plain},
		{"vt220", "vt220", "/dev/tty1", "", Plain},
		{"ansi", "ansi", "", "", Plain},
		{"dumb", "dumb", "", "", Plain},
		{"empty TERM", "", "", "", Plain},
		{"upper case", "VT100", "", "", Plain},
		{"ttyS0 beats xterm", "xterm-256color", "/dev/ttyS0", "", Plain},
		{"ttyAMA0", "linux", "ttyAMA0", "", Plain},
		{"hvc0", "xterm", "/dev/hvc0", "", Plain},
		{"override rich on serial", "vt220", "/dev/ttyS1", "rich", Rich},
		{"override linux", "xterm-256color", "", "linux", Linux},
		{"override plain", "xterm-256color", "", "plain", Plain},
		{"override serial alias", "xterm-256color", "", "serial", Plain},
		{"bad override ignored", "linux", "/dev/tty1", "fancy", Linux},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Detect(tt.term, tt.tty, tt.override); got != tt.want {
				t.Errorf("Detect(%q, %q, %q) = %v; want %v", tt.term, tt.tty, tt.override, got, tt.want)
			}
		})
	}
}

func TestCmdlineOverride(t *testing.T) {
	tests := []struct{ cmdline, want string }{
		{"", ""},
		{"BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet", ""},
		{"root=/dev/sda1 virtcon.console=plain console=ttyS0\n", "plain"},
		{"virtcon.console=rich virtcon.console=linux", "linux"},
		{"virtcon.consoles=rich", ""},
	}
	for _, tt := range tests {
		if got := CmdlineOverride(tt.cmdline); got != tt.want {
			t.Errorf("CmdlineOverride(%q) = %q; want %q", tt.cmdline, got, tt.want)
		}
	}
}

func TestSize(t *testing.T) {
	tests := []struct{ w, h, ww, wh int }{
		{0, 0, 80, 24},
		{0, 40, 80, 40},
		{120, 0, 120, 24},
		{132, 43, 132, 43},
		{-1, -1, 80, 24},
	}
	for _, tt := range tests {
		if w, h := Size(tt.w, tt.h); w != tt.ww || h != tt.wh {
			t.Errorf("Size(%d, %d) = %dx%d; want %dx%d", tt.w, tt.h, w, h, tt.ww, tt.wh)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in     string
		w, h   int
		wantOK bool
	}{
		{"80x24", 80, 24, true},
		{"132X43", 132, 43, true},
		{"80", 0, 0, false},
		{"0x24", 0, 0, false},
		{"ax24", 0, 0, false},
	}
	for _, tt := range tests {
		w, h, err := ParseSize(tt.in)
		if (err == nil) != tt.wantOK || w != tt.w || h != tt.h {
			t.Errorf("ParseSize(%q) = %d, %d, %v; want %d, %d, ok=%v", tt.in, w, h, err, tt.w, tt.h, tt.wantOK)
		}
	}
}

func TestParseTierRoundTrip(t *testing.T) {
	for _, tier := range []Tier{Rich, Linux, Plain} {
		got, err := ParseTier(tier.String())
		if err != nil || got != tier {
			t.Errorf("ParseTier(%q) = %v, %v; want %v", tier.String(), got, err, tier)
		}
	}
	if Plain.MaxFPS() > 4 {
		t.Errorf("Plain.MaxFPS() = %d; want at most 4", Plain.MaxFPS())
	}
}
