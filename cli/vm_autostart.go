package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
)

func newVMAutostartCmd(env *Env) *cobra.Command {
	var (
		order int
		delay time.Duration
	)
	cmd := &cobra.Command{
		Use:   "autostart NAME on|off",
		Short: "Set whether virt host boot starts a VM, and its startup order and delay",
		Long: `Set spec.autostart (on or off) and, with --startup-order and --startup-delay,
spec.startup: where the VM goes in the starts of virt host boot (lower orders
first, then by name; each after its delay). Without those flags the VM keeps
its order and delay. The same change the DCUI's VM menu makes (t).`,
		Example: `  virt vm autostart db on --startup-order 1
  virt vm autostart web on --startup-order 2 --startup-delay 30s
  virt vm autostart scratch off`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			var on bool
			switch args[1] {
			case "on":
				on = true
			case "off":
			default:
				return &UsageError{fmt.Errorf("autostart %q: want on or off", args[1])}
			}
			m := env.vms()
			e, err := m.Peek(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !e.Actionable() {
				return &UsageError{errors.New(e.Name + " is " + e.Class + ": nothing acts on it")}
			}
			if !cmd.Flags().Changed("startup-order") {
				order = e.StartupOrder
			}
			if !cmd.Flags().Changed("startup-delay") {
				delay = e.StartupDelay
			}
			if err := m.SetAutostart(cmd.Context(), e.UID, on, order, delay); err != nil {
				return err
			}
			if e, err = m.Peek(cmd.Context(), e.UID); err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, e, func(w io.Writer) error {
				fmt.Fprintf(w, "%s: autostart %s, startup order %d, delay %s\n", e.Name, map[bool]string{true: "on", false: "off"}[e.Autostart], e.StartupOrder, e.StartupDelay)
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&order, "startup-order", 0, fmt.Sprintf("its place in the boot's starts: lower first, then by name (0 to %d)", vm.MaxStartupOrder))
	durationFlag(cmd.Flags(), &delay, "startup-delay", 0, "wait this long before starting it at boot (at most 1h)")
	_ = cmd.RegisterFlagCompletionFunc("startup-order", cobra.NoFileCompletions)
	return cmd
}
