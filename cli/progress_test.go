package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

func TestOpProgressLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    vm.OpProgress
		want string
	}{
		{name: "bytes of at most the RAM", p: vm.OpProgress{VM: "m", Op: "saving memory", Elapsed: 4200 * time.Millisecond, Bytes: 412 << 20, Total: 1 << 30, AtMost: true},
			want: "m: saving memory: 412 MiB of at most 1 GiB (4s)"},
		{name: "bytes of a known size", p: vm.OpProgress{VM: "m", Op: "loading memory", Elapsed: 2 * time.Second, Bytes: 412 << 20, Total: 835 << 20},
			want: "m: loading memory: 412 MiB of 835 MiB, 49% (2s)"},
		{name: "bytes, no total", p: vm.OpProgress{VM: "m", Op: "saving state", Elapsed: time.Second, Bytes: 3 << 20, Total: -1},
			want: "m: saving state: 3 MiB (1s)"},
		{name: "only the time", p: vm.OpProgress{VM: "m", Op: "loading memory", Elapsed: 7 * time.Second, Bytes: -1, Total: -1},
			want: "m: loading memory (7s)"},
		{name: "under a second", p: vm.OpProgress{VM: "m", Op: "saving memory", Elapsed: 250 * time.Millisecond, Bytes: -1, Total: -1},
			want: "m: saving memory (200ms)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := opProgressLine(tc.p); got != tc.want {
				t.Errorf("opProgressLine = %q; want %q", got, tc.want)
			}
		})
	}
}

// Progress goes to a terminal's stderr, updated in place, and ends its
// line when done; stderr that is no terminal gets none.
func TestOpProgressTTY(t *testing.T) {
	var errOut bytes.Buffer
	env := &Env{IO: &IOStreams{ErrOut: &errOut, ErrTTY: true}}
	report := env.opProgress()
	report(vm.OpProgress{VM: "m", Op: "saving memory", Elapsed: time.Second, Bytes: -1, Total: -1})
	report(vm.OpProgress{VM: "m", Op: "saving memory", Elapsed: 2 * time.Second, Bytes: -1, Total: -1, Done: true})
	if got := errOut.String(); got != "\rm: saving memory (1s)\x1b[K\rm: saving memory (2s)\x1b[K\n" {
		t.Errorf("stderr %q; want two reports in place and a newline", got)
	}
	env.IO.ErrTTY = false
	if env.opProgress() != nil {
		t.Error("a progress function for stderr that is no terminal; want none")
	}
}
