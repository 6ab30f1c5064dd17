package term

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// VT220 wraps the plain tier's output so that only what a VT220 knows
// reaches the line: text, C0 controls, ESC sequences without a string,
// and control sequences (CSI) that are ECMA-48/VT220 ones (cursor
// movement, erase, SGR, scrolling region). Bubble Tea asks every terminal
// about xterm and kitty features and turns on their modes (the DECRQM
// query ESC[?2026$p, modifyOtherKeys ESC[>4;2m, the kitty keyboard
// ESC[>1u and its query ESC[?u, bracketed paste ESC[?2004h, mouse and
// focus reporting, window titles): a real serial terminal prints those as
// garbage or, worse, answers late into the input, and the first frame
// comes out half drawn. Dropped are every CSI sequence with a private
// marker (<=>?) or an intermediate byte ($, space, ...), except the DEC
// private modes a VT220 has (?7 autowrap, ?25 cursor) and ?1049 (the
// alternate screen: a VT220 ignores it, a terminal emulator at the far
// end gives the operator's screen back on exit), and every string
// sequence (OSC, DCS, APC, PM, SOS). Sequences cut across writes are
// held until complete.
//
// If w is a terminal (an *os.File on a tty), the result is one too (it
// has Fd, Read and Close), so the program still finds the terminal's size
// and puts it in raw mode.
func VT220(w io.Writer) io.Writer {
	f := &vt220Writer{out: w}
	if t, ok := w.(terminalFile); ok {
		return &vt220File{vt220Writer: f, file: t}
	}
	return f
}

type terminalFile interface {
	io.ReadWriteCloser
	Fd() uintptr
}

type vt220File struct {
	*vt220Writer
	file terminalFile
}

func (f *vt220File) Read(p []byte) (int, error) { return f.file.Read(p) }
func (f *vt220File) Close() error               { return f.file.Close() }
func (f *vt220File) Fd() uintptr                { return f.file.Fd() }

// vt220Writer filters a byte stream; it is safe for concurrent writers
// (Bubble Tea's renderer and its program both write).
type vt220Writer struct {
	mu      sync.Mutex
	out     io.Writer
	pending []byte // an escape sequence not yet complete
}

// allowedPrivateModes are the DEC private modes let through.
var allowedPrivateModes = map[string]bool{"7": true, "25": true, "1049": true}

// maxSequence bounds a held sequence: longer is not one we let through.
const maxSequence = 256

func (f *vt220Writer) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	buf := p
	if len(f.pending) > 0 {
		buf = append(f.pending, p...)
		f.pending = nil
	}
	var out bytes.Buffer
	for i := 0; i < len(buf); {
		b := buf[i]
		if b != 0x1b {
			j := bytes.IndexByte(buf[i:], 0x1b)
			if j < 0 {
				out.Write(buf[i:])
				break
			}
			out.Write(buf[i : i+j])
			i += j
			continue
		}
		n, keep, complete := sequence(buf[i:])
		if !complete {
			if len(buf)-i <= maxSequence {
				f.pending = append([]byte(nil), buf[i:]...)
			}
			break
		}
		if keep {
			out.Write(rewrite(buf[i : i+n]))
		}
		i += n
	}
	if out.Len() > 0 {
		if _, err := f.out.Write(out.Bytes()); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// sequence measures the escape sequence at the start of b (b[0] is ESC):
// its length, whether it may reach a VT220, and whether it is complete in
// b.
func sequence(b []byte) (n int, keep, complete bool) {
	if len(b) < 2 {
		return 0, false, false
	}
	switch b[1] {
	case '[': // CSI: parameters 0x30-0x3F, intermediates 0x20-0x2F, final 0x40-0x7E
		private, intermediate := false, false
		for i := 2; i < len(b); i++ {
			c := b[i]
			switch {
			case c >= 0x3c && c <= 0x3f && i == 2:
				private = true
			case c >= 0x30 && c <= 0x3f:
			case c >= 0x20 && c <= 0x2f:
				intermediate = true
			case c >= 0x40 && c <= 0x7e:
				if intermediate {
					return i + 1, false, true
				}
				if private {
					return i + 1, b[2] == '?' && (c == 'h' || c == 'l') && privateModesAllowed(b[3:i]), true
				}
				return i + 1, true, true
			default: // not a CSI byte: the sequence is broken; drop what came
				return i, false, true
			}
		}
		return 0, false, false
	case ']', 'P', '_', '^', 'X': // OSC, DCS, APC, PM, SOS: up to ST (ESC \) or, for OSC, BEL
		for i := 2; i < len(b); i++ {
			if b[i] == 0x07 && b[1] == ']' {
				return i + 1, false, true
			}
			if b[i] == 0x1b && i+1 < len(b) {
				if b[i+1] == '\\' {
					return i + 2, false, true
				}
			} else if b[i] == 0x1b {
				return 0, false, false
			}
		}
		return 0, false, false
	}
	// ESC with intermediates (ESC ( B: a character set) then a final
	for i := 1; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c > 0x2f {
			return i + 1, true, true
		}
	}
	return 0, false, false
}

// privateModesAllowed reports whether at least one of the ;-separated DEC
// private modes in params is let through; rewrite drops the others.
func privateModesAllowed(params []byte) bool {
	for _, m := range strings.Split(string(params), ";") {
		if allowedPrivateModes[m] {
			return true
		}
	}
	return false
}

// rewrite keeps only the allowed modes of a DEC private mode sequence
// (ESC[?1049;2004h becomes ESC[?1049h); anything else is returned as is.
func rewrite(seq []byte) []byte {
	if len(seq) < 4 || seq[1] != '[' || seq[2] != '?' {
		return seq
	}
	final := seq[len(seq)-1]
	var kept []string
	for _, m := range strings.Split(string(seq[3:len(seq)-1]), ";") {
		if allowedPrivateModes[m] {
			kept = append(kept, m)
		}
	}
	return []byte("\x1b[?" + strings.Join(kept, ";") + string(final))
}
