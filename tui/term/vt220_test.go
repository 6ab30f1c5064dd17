package term

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// xtermOnly are sequences Bubble Tea writes that a VT220 does not know:
// none may reach a plain-tier line.
var xtermOnly = []string{
	"\x1b[?2026$p", "\x1b[?2027$p", "\x1b[>4;2m", "\x1b[>4m", "\x1b[>1u", "\x1b[>0u", "\x1b[<u", "\x1b[=1;1u", "\x1b[?u",
	"\x1b[?2004h", "\x1b[?2004l", "\x1b[?1000h", "\x1b[?1002h", "\x1b[?1003h", "\x1b[?1006h", "\x1b[?1004h",
	"\x1b[?2027h", "\x1b[?2026h", "\x1b[?2026l", "\x1b[2 q", "\x1b]0;title\x07", "\x1b]2;title\x1b\\",
	"\x1bP+q544e\x1b\\", "\x1b]11;?\x07", "\x1b_Gi=1\x1b\\",
}

func TestVT220DropsXtermSequences(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"text", "hello\r\n", "hello\r\n"},
		{"cursor, erase, sgr", "\x1b[H\x1b[2J\x1b[1;1H\x1b[K\x1b[7mX\x1b[m\x1b[24;80H", "\x1b[H\x1b[2J\x1b[1;1H\x1b[K\x1b[7mX\x1b[m\x1b[24;80H"},
		{"vt220 private modes", "\x1b[?25l\x1b[?7h\x1b[?1049h\x1b[?1049l\x1b[?25h", "\x1b[?25l\x1b[?7h\x1b[?1049h\x1b[?1049l\x1b[?25h"},
		{"mixed private modes", "\x1b[?1049;2004h", "\x1b[?1049h"},
		{"esc sequences", "\x1b7\x1b8\x1b(B\x1bM", "\x1b7\x1b8\x1b(B\x1bM"},
		{"bubble tea start", "\x1b[?2026$p\x1b[?2027$p\x1b[?1049h\x1b[?25l\x1b[?2004h\x1b[>4;2m\x1b[>1u\x1b[?u\x1b[H\x1b[2J+--+", "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J+--+"},
	}
	for _, x := range xtermOnly {
		tests = append(tests, struct{ name, in, want string }{"drops " + strings.ReplaceAll(x, "\x1b", "ESC"), "a" + x + "b", "ab"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := VT220(&out)
			if n, err := w.Write([]byte(tc.in)); err != nil || n != len(tc.in) {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(tc.in))
			}
			if got := out.String(); got != tc.want {
				t.Errorf("VT220(%q) wrote %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

// A sequence cut across writes is held, then judged whole.
func TestVT220SplitWrites(t *testing.T) {
	in := "A\x1b[?2026$pB\x1b[?1049hC\x1b]0;t\x07D\x1b[1;1HE"
	want := "AB\x1b[?1049hCD\x1b[1;1HE"
	for cut := 1; cut < len(in); cut++ {
		var out bytes.Buffer
		w := VT220(&out)
		w.Write([]byte(in[:cut]))
		w.Write([]byte(in[cut:]))
		if got := out.String(); got != want {
			t.Errorf("cut at %d: wrote %q; want %q", cut, got, want)
		}
	}
}

// On a terminal the wrapper is one too, so Bubble Tea still sizes it and
// makes it raw.
func TestVT220KeepsTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := VT220(f)
	tf, ok := w.(interface{ Fd() uintptr })
	if !ok || tf.Fd() != f.Fd() {
		t.Fatalf("VT220(*os.File) = %T; want one with the file's Fd", w)
	}
	if _, ok := VT220(&bytes.Buffer{}).(interface{ Fd() uintptr }); ok {
		t.Error("VT220(buffer) has an Fd")
	}
}

func TestIsKernelConsole(t *testing.T) {
	tests := []struct {
		active, tty string
		want        bool
	}{
		{"tty0 ttyS0", "ttyS0", true},
		{"tty0 ttyS0", "/dev/ttyS0", true},
		{"tty0 ttyS0", "ttyS1", false},
		{"tty0 ttyS0", "tty1", true},
		{"tty0 ttyS0", "tty12", true},
		{"ttyS0", "tty1", false},
		{"tty1", "tty1", true},
		{"tty0", "pts/3", false},
		{"tty0", "web/3f2a", false},
		{"hvc0", "hvc0", true},
		{"", "ttyS0", false},
		{"tty0", "", false},
		{"tty0", "tty0", true},
		{"tty0", "ttyS0", false},
	}
	for _, tc := range tests {
		if got := IsKernelConsole(tc.active, tc.tty); got != tc.want {
			t.Errorf("IsKernelConsole(%q, %q) = %v; want %v", tc.active, tc.tty, got, tc.want)
		}
	}
}
