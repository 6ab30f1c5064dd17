package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/power"
)

// hostPower does the action; tests replace it so that nothing they run
// can reboot the machine.
var hostPower = func(ctx context.Context, log *slog.Logger, a power.Action) error {
	if a == power.ActionPowerOff {
		return power.PowerOff(ctx, log)
	}
	return power.Reboot(ctx, log)
}

func newHostPowerCmd(env *Env, a power.Action) *cobra.Command {
	var yes bool
	what := map[power.Action]string{power.ActionReboot: "Reboot", power.ActionPowerOff: "Power off"}[a]
	cmd := &cobra.Command{
		Use:   a.String() + " --yes",
		Short: what + " the host (needs --yes; the running VMs are shut down first, as host.yaml says)",
		Long: what + ` the host: first take the running VMs down as virt host shutdown-guests
does (host.yaml's onShutdown: ACPI power-off in parallel with one deadline,
quit for those still up then; or save; or kill), with each VM's progress on
stderr; then sync the disks and systemctl ` + a.String() + ` (or ` + a.String() + ` where
systemd is not PID 1). Guests virtcon does not manage die with the host.
Without --yes it only says what is running and what would happen to it, and
exits 2.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			vms, err := env.vms().List(ctx)
			p, perr := host.LoadPolicy(env.Layout())
			if perr != nil {
				p = host.DefaultPolicy() // what shutdown-guests falls back to
			}
			running := power.Running(vms)
			warning := power.Warning(running, 5, p.ShutdownPlan())
			switch {
			case err != nil && len(vms) == 0:
				warning = fmt.Sprintf("could not list the VMs (%v); the host does not go down before they can be shut down", err)
			case warning == "":
				warning = "no VM is running"
			}
			if perr != nil {
				warning += fmt.Sprintf(" (host.yaml not loaded, so with the defaults: %v)", perr)
			}
			if !yes {
				return &UsageError{fmt.Errorf("host %s: refused without --yes: %s", a, warning)}
			}
			fmt.Fprintf(textOnly{env.IO.ErrOut}, "%s: %s\n", a, warning)
			// always: even with nothing running, the record says so
			rep, err := env.Host().ShutdownGuests(ctx, host.ShutdownOptions{Progress: env.shutdownProgress()})
			if rep == nil {
				// nothing was stopped: the guests would die hard
				return fmt.Errorf("host %s: not done: the VMs could not be shut down first: %w (stop them with virt vm stop, then try again)", a, err)
			}
			fmt.Fprintln(textOnly{env.IO.ErrOut}, shutdownSummary(rep))
			if err != nil {
				fmt.Fprintf(textOnly{env.IO.ErrOut}, "%s: %v; going on\n", a, err)
			}
			return hostPower(ctx, env.Logger, a)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "really "+strings.ToLower(what)+" the host")
	return cmd
}
