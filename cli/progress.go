package cli

import (
	"fmt"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// opProgress words a long QEMU operation's progress (a memory snapshot,
// its restore, a save, a resume) on stderr: a line that updates in place
// on a terminal, nothing otherwise (logs and pipes get the summary), as
// pullProgress does for a pull.
func (e *Env) opProgress() vm.OpProgressFunc {
	if !e.IO.ErrTTY {
		return nil
	}
	return func(p vm.OpProgress) {
		fmt.Fprintf(e.IO.ErrOut, "\r%s\x1b[K", opProgressLine(p))
		if p.Done {
			fmt.Fprintln(e.IO.ErrOut)
		}
	}
}

// opProgressLine is one progress report: what QEMU does, how far it has
// come where that can be told, and for how long.
func opProgressLine(p vm.OpProgress) string {
	took := p.Elapsed.Truncate(time.Second)
	if took == 0 {
		took = p.Elapsed.Truncate(100 * time.Millisecond)
	}
	switch {
	case p.Bytes >= 0 && p.Total > 0 && p.AtMost:
		return fmt.Sprintf("%s: %s: %s of at most %s (%s)", p.VM, p.Op, humanBytes(p.Bytes), humanBytes(p.Total), took)
	case p.Bytes >= 0 && p.Total > 0:
		return fmt.Sprintf("%s: %s: %s of %s, %d%% (%s)", p.VM, p.Op, humanBytes(p.Bytes), humanBytes(p.Total), min(100, p.Bytes*100/p.Total), took)
	case p.Bytes >= 0:
		return fmt.Sprintf("%s: %s: %s (%s)", p.VM, p.Op, humanBytes(p.Bytes), took)
	}
	return fmt.Sprintf("%s: %s (%s)", p.VM, p.Op, took)
}
