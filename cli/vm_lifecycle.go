package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
)

func newVMStartCmd(env *Env) *cobra.Command {
	var opts vm.StartOptions
	cmd := &cobra.Command{
		Use:   "start NAME",
		Short: "Start a VM; its QEMU runs detached and survives virt (a Saved VM resumes where it was)",
		Long: `Start a VM; its QEMU runs detached and survives virt. A VM whose state was
saved (phase Saved: virt vm save, or virt host shutdown-guests with
onShutdown: save) resumes from it where it was; the saved state is removed
once it is loaded, before the guest runs on. A saved state that is damaged,
or from another QEMU version, or whose VM's machine, memory, CPUs, firmware,
disks or NICs changed since, or older than the VM's last start, is refused
and the VM does not start: --discard-saved throws the state away and boots
the guest fresh.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			m := env.vms()
			opts.Progress = env.opProgress() // a resume loads the saved state
			if err := m.StartWith(cmd.Context(), args[0], opts); err != nil {
				return err
			}
			e, err := m.Peek(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, e, func(w io.Writer) error {
				fmt.Fprintf(w, "%s: %s (pid %d, accel %s)\n", e.Name, e.Phase, e.PID, e.Accel)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&opts.DiscardSaved, "discard-saved", false, "throw a saved state away and boot the guest fresh (what it had in RAM is lost)")
	return cmd
}

func newVMStopCmd(env *Env) *cobra.Command {
	var opts vm.StopOptions
	cmd := &cobra.Command{
		Use:   "stop NAME",
		Short: "Stop a VM: the ACPI power button, --timeout for the guest to power off, then (--force) end QEMU",
		Long: `Stop a VM: press its ACPI power button and give the guest --timeout to power
off. A guest still up then is left running and the stop fails (exit 1),
unless --force: then QEMU is ended (QMP quit, then SIGKILL). --timeout 0
presses no button and gives no grace: QEMU is ended at once, as virt vm kill.
virt-director task run NODE stop-vm takes the same flags and does the same.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("timeout") && opts.Timeout == 0 {
				opts.Now = true // --timeout 0: no power button, no grace
			}
			res, err := env.vms().PowerOff(cmd.Context(), args[0], opts)
			if errors.Is(err, vm.ErrStillRunning) {
				return fmt.Errorf("%w; --force ends QEMU once --timeout has run out, virt vm kill at once", err)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(env.IO.ErrOut, "%s %s\n", args[0], stopWords(res, opts))
			return nil
		},
	}
	durationFlag(cmd.Flags(), &opts.Timeout, "timeout", vm.DefaultStopTimeout, "how long the guest gets to power off after the ACPI power button; 0: no button, QEMU is ended at once")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "end QEMU (quit, then SIGKILL) if the guest has not powered off by the end of --timeout; without it the guest is left running and the stop fails")
	return cmd
}

func newVMSimpleCmd(env *Env, name, short string, f func(vmService, *cobra.Command, string) error) *cobra.Command {
	return &cobra.Command{
		Use:               name + " NAME",
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f(env.vms(), cmd, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(env.IO.ErrOut, "%s: %s done\n", args[0], name)
			return nil
		},
	}
}

func newVMDeleteCmd(env *Env) *cobra.Command {
	var force, withSnapshots bool
	cmd := &cobra.Command{
		Use:               "delete NAME",
		Aliases:           []string{"rm"},
		Short:             "Delete a VM with its disks, seed and logs (refused while running unless --force, with snapshots unless --with-snapshots)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if withSnapshots {
				err = env.snapshots().DeleteWith(cmd.Context(), args[0], vm.DeleteOptions{Force: force, WithSnapshots: true})
			} else {
				err = env.vms().Delete(cmd.Context(), args[0], force)
			}
			if err != nil {
				return wordSnapshotError(err)
			}
			fmt.Fprintf(env.IO.ErrOut, "%s deleted\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "kill a running VM first")
	cmd.Flags().BoolVar(&withSnapshots, "with-snapshots", false, "delete a VM that has snapshots, and them with it")
	return cmd
}
