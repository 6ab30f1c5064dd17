package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/vm"
)

// saveOutput is what `virt vm save -o json` prints.
type saveOutput struct {
	Name  string            `json:"name" yaml:"name"`
	Path  string            `json:"path" yaml:"path"`
	Bytes int64             `json:"bytes" yaml:"bytes"`
	Took  duration.Duration `json:"took" yaml:"took"`
}

func newVMSaveCmd(env *Env) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "save NAME",
		Short: "Save a running VM's RAM and device state to disk and end its QEMU; virt vm start resumes it",
		Long: `Save a running VM's RAM and device state to a file in its state directory
(QEMU migration to a file descriptor virt opens, 0600) and end its QEMU: the
VM's phase becomes Saved and spec.running stays true, so virt vm start (or
virt host boot) resumes the guest where it was. The guest is paused for the
save, so the state matches its disks. A save that fails or runs past
--timeout leaves the guest running as it was, with nothing saved.

The state loads only into the same QEMU version, with the machine, memory,
CPUs and devices the running QEMU was started with (a change applied to the
running VM is not in it); virt vm start refuses a state that does not (and a
damaged one) rather than boot the guest fresh: --discard-saved does that.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return &UsageError{fmt.Errorf("--timeout %s: must be more than 0", timeout)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			fmt.Fprintf(env.IO.ErrOut, "saving %s…\n", args[0])
			res, err := env.vms().SaveWith(ctx, args[0], vm.SaveOptions{Progress: env.opProgress()})
			if err != nil {
				return err
			}
			out := saveOutput{Name: args[0], Path: res.Path, Bytes: res.Bytes, Took: duration.Duration(res.Took)}
			return render(env.IO.Out, env.Output, out, func(w io.Writer) error {
				fmt.Fprintf(w, "%s: %s (%s in %s); virt vm start %s resumes it\n", args[0], vm.PhaseSaved, humanBytes(res.Bytes), res.Took.Round(10*time.Millisecond), args[0])
				return nil
			})
		},
	}
	durationFlag(cmd.Flags(), &timeout, "timeout", vm.DefaultSaveTimeout, "give up (and let the guest run on) after this long")
	return cmd
}
