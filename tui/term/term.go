package term

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Tier is what a console can display.
type Tier int

// The tiers, from most to least capable.
const (
	// Rich: a terminal emulator (xterm-256color, tmux, SSH clients): colour,
	// rounded borders, any glyph.
	Rich Tier = iota
	// Linux: the kernel's VT (TERM=linux): 16 colours and only the glyphs
	// of the VGA font, so normal (single-line) borders.
	Linux
	// Plain: serial lines, IPMI SOL and dumb terminals: ASCII only, no
	// colour as the sole signal, at most 4 redraws a second.
	Plain
)

// String is the name used by --tier and virtcon.console=.
func (t Tier) String() string {
	switch t {
	case Rich:
		return "rich"
	case Linux:
		return "linux"
	case Plain:
		return "plain"
	}
	return "tier(" + strconv.Itoa(int(t)) + ")"
}

// ParseTier parses "rich", "linux" or "plain" ("serial" is an alias of
// plain). The empty string is an error: callers treat it as "no override".
func ParseTier(s string) (Tier, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "rich":
		return Rich, nil
	case "linux":
		return Linux, nil
	case "plain", "serial":
		return Plain, nil
	}
	return Plain, fmt.Errorf("unknown console tier %q (want rich, linux or plain)", s)
}

// plainTERMs are TERM values that get the plain tier: hardware terminals
// and what getty sets on serial lines.
var plainTERMs = map[string]bool{
	"":      true,
	"dumb":  true,
	"vt100": true,
	"vt102": true,
	"vt220": true,
	"ansi":  true,
}

// serialTTYPrefixes are tty device names of serial consoles: 8250/16550
// UARTs, ARM PL011 and hypervisor consoles.
var serialTTYPrefixes = []string{"ttyS", "ttyAMA", "hvc"}

// Detect picks the tier. A valid override (from --tier or
// virtcon.console=) wins; then a serial tty device (whatever TERM claims,
// since a serial line can be anything at the far end); then TERM. An
// invalid override is ignored. ttyDevice may be a path (/dev/ttyS0) or a
// bare name; empty means unknown.
func Detect(termEnv, ttyDevice, override string) Tier {
	if override != "" {
		if t, err := ParseTier(override); err == nil {
			return t
		}
	}
	if ttyDevice != "" {
		name := path.Base(ttyDevice)
		for _, p := range serialTTYPrefixes {
			if strings.HasPrefix(name, p) {
				return Plain
			}
		}
	}
	t := strings.ToLower(strings.TrimSpace(termEnv))
	switch {
	case plainTERMs[t]:
		return Plain
	case t == "linux":
		return Linux
	}
	return Rich
}

// CmdlineKey is the kernel command line argument that overrides the tier.
const CmdlineKey = "virtcon.console"

// CmdlineOverride returns the value of virtcon.console= in a kernel command
// line (the contents of /proc/cmdline), or "" when absent. The last one
// wins, as the kernel does for its own arguments.
func CmdlineOverride(cmdline string) string {
	v := ""
	for _, f := range strings.Fields(cmdline) {
		if k, val, ok := strings.Cut(f, "="); ok && k == CmdlineKey {
			v = val
		}
	}
	return v
}

// Default size, used when a tty reports 0x0 (serial lines do).
const (
	DefaultWidth  = 80
	DefaultHeight = 24
)

// Size returns the size to lay out for: a zero (or negative) dimension is
// replaced by 80x24's.
func Size(w, h int) (int, int) {
	if w <= 0 {
		w = DefaultWidth
	}
	if h <= 0 {
		h = DefaultHeight
	}
	return w, h
}

// ParseSize parses a "WxH" size override such as "80x24".
func ParseSize(s string) (w, h int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	if ok {
		w, err = strconv.Atoi(ws)
		if err == nil {
			h, err = strconv.Atoi(hs)
		}
	}
	if !ok || err != nil || w <= 0 || h <= 0 {
		return 0, 0, fmt.Errorf("size %q: want WxH, for example 80x24", s)
	}
	return w, h, nil
}

// MaxFPS is the redraw limit for a tier: a 9600-baud serial line cannot
// keep up with more than a few full frames a second, and the kernel's VT
// draws slowly; a terminal emulator (SSH, tmux, the browser's xterm.js)
// redraws at 60, so that a key's answer waits at most a sixtieth of a
// second for its frame (the renderer writes only what changed).
func (t Tier) MaxFPS() int {
	switch t {
	case Plain:
		return 4
	case Linux:
		return 30
	}
	return 60
}
