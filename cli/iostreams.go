package cli

import (
	"io"
	"os"

	"github.com/mattn/go-isatty"
)

// IOStreams are the command's terminals: data goes to Out, progress,
// warnings and errors to ErrOut.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// OutTTY is true when Out is a terminal; ErrTTY when ErrOut is one
	// (progress that updates in place goes there only then).
	OutTTY bool
	ErrTTY bool
	// Color is true when colour may be used on Out.
	Color bool
}

// System returns the process's own streams.
func System() *IOStreams {
	tty := isatty.IsTerminal(os.Stdout.Fd())
	return &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr, OutTTY: tty, Color: tty, ErrTTY: isatty.IsTerminal(os.Stderr.Fd())}
}

// paint wraps s in an ANSI colour when colour is on.
func (s *IOStreams) paint(code, text string) string {
	if !s.Color {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}
