package dcui

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/tui/term"
)

// panicky panics on its first key, in Update or in a command.
type panicky struct{ inCmd bool }

func (p panicky) Init() tea.Cmd { return nil }
func (p panicky) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if _, ok := msg.(tea.KeyPressMsg); ok {
		if p.inCmd {
			return p, func() tea.Msg { panic("boom in a command") }
		}
		panic("boom in Update")
	}
	return p, nil
}
func (p panicky) View() tea.View {
	v := tea.NewView("hello")
	v.AltScreen = true
	return v
}

// TestPanicRestoresTerminal: the program as Main builds it leaves the
// alternate screen and shows the cursor again when the model panics.
func TestPanicRestoresTerminal(t *testing.T) {
	for _, inCmd := range []bool{false, true} {
		name := "update"
		if inCmd {
			name = "command"
		}
		t.Run(name, func(t *testing.T) {
			in, inW := io.Pipe()
			var out testutil.Buffer
			p := newProgram(panicky{inCmd: inCmd}, term.Plain, tea.WithInput(in), tea.WithOutput(&out),
				tea.WithWindowSize(80, 24), tea.WithoutSignalHandler())
			done := make(chan error, 1)
			go func() { _, err := p.Run(); done <- err }()
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(out.String(), "hello") {
				if time.Now().After(deadline) {
					t.Fatalf("no first frame; output %q", out.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			inW.Write([]byte("x"))
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("program still running 5 s after the panic")
			}
			inW.Close()
			if !errors.Is(err, tea.ErrProgramPanic) {
				t.Errorf("Run = %v; want ErrProgramPanic", err)
			}
			got := out.String()
			if !strings.Contains(got, "\x1b[?1049l") || !strings.Contains(got, "\x1b[?25h") {
				t.Errorf("terminal not restored (alt screen left, cursor shown) after a panic; output %q", got)
			}
		})
	}
}
