package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
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
		Short: what + " the host (needs --yes; running VMs are stopped hard)",
		Long: what + ` the host: sync the disks, then systemctl ` + a.String() + ` (or ` + a.String() + `
where systemd is not PID 1). virtcon does not stop the VMs first: their QEMU
processes die with the host, so stop them (virt vm stop) before if they
matter. Without --yes it only says how many VMs are running and exits 2.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			vms, err := env.vms().List(ctx)
			warning := power.Warning(power.Running(vms), 5)
			switch {
			case err != nil && len(vms) == 0:
				warning = fmt.Sprintf("could not list the VMs (%v); any running VM will be stopped hard", err)
			case warning == "":
				warning = "no VM is running"
			}
			if !yes {
				return &UsageError{fmt.Errorf("host %s: refused without --yes: %s", a, warning)}
			}
			fmt.Fprintf(env.IO.ErrOut, "%s: %s\n", a, warning)
			return hostPower(ctx, env.Logger, a)
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "really "+strings.ToLower(what)+" the host")
	return cmd
}
