package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/netcfg"
)

// networkFile is the desired host network under --root.
func (e *Env) networkFile() string { return netcfg.DesiredFile(e.Layout()) }

func newNetCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Host networking: bridges, VLANs, VM networks; applied by netlink with automatic rollback",
	}
	cmd.AddCommand(newNetShowCmd(env), newNetApplyCmd(env), newNetConfirmCmd(env), newNetRollbackCmd(env), newNetStatusCmd(env),
		newNetBridgeCmd(env), newNetNATCmd(env), newNetTestCmd(env), newNetResetDHCPCmd(env))
	return cmd
}

func readNetworkFile(path string) (*netcfg.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return netcfg.Decode(b)
}

func newNetShowCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show what applying network.yaml would change on the live host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := readNetworkFile(env.networkFile())
			if errors.Is(err, os.ErrNotExist) {
				cfg = &netcfg.Config{APIVersion: netcfg.APIVersion, Kind: netcfg.Kind}
			} else if err != nil {
				return err
			}
			res, err := netcfg.Apply(cmd.Context(), env.Logger, env.Layout(), cfg, netcfg.ApplyOptions{DryRun: true, AllowDefaultRouteChange: true})
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, res, func(w io.Writer) error {
				if len(res.Steps) == 0 {
					fmt.Fprintf(w, "in sync with %s\n", env.networkFile())
				}
				for _, s := range res.Steps {
					fmt.Fprintf(w, "~ %s\n", s)
				}
				return nil
			})
		},
	}
}

func newNetApplyCmd(env *Env) *cobra.Command {
	var (
		file   string
		try    time.Duration
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--try 60s]",
		Short: "Apply a host network file; with --try, roll back at the deadline unless confirmed",
		Long: `Apply a network.yaml: only what differs changes, each step undone if a later
one fails. With --try D the affected links are snapshotted first and a separate
watchdog process restores them at the deadline unless 'virt net confirm' runs
before: a killed CLI or a dropped SSH session still gets its network back.
Enslaving the interface that carries the default route needs --try.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return &UsageError{errors.New("net apply: -f FILE is required")}
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return &UsageError{fmt.Errorf("net apply: %w", err)}
			}
			return applyNetwork(cmd, env, nil, data, try, dryRun)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "network file (network.yaml)")
	cmd.Flags().DurationVar(&try, "try", 0, "roll back after this long unless confirmed (e.g. 60s)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print the steps")
	return cmd
}

// applyNetwork applies cfg (whose file content is data, nil to marshal
// cfg), directly or as a try, and records it as the desired network.yaml
// (on confirm, for a try): netcfg.ApplyDesired, rendered.
func applyNetwork(cmd *cobra.Command, env *Env, cfg *netcfg.Config, data []byte, try time.Duration, dryRun bool) error {
	res, pending, err := netcfg.ApplyDesired(cmd.Context(), env.Logger, env.Layout(), cfg,
		netcfg.DesiredOptions{Try: try, DryRun: dryRun, Data: data})
	if errors.Is(err, netcfg.ErrDeadlineTooShort) {
		return &UsageError{err}
	}
	if err != nil {
		return err
	}
	if pending == nil {
		return render(env.IO.Out, env.Output, res, func(w io.Writer) error {
			for _, s := range res.Steps {
				fmt.Fprintf(w, "%s\n", s)
			}
			fmt.Fprintf(w, "%d changes\n", len(res.Steps))
			return nil
		})
	}
	fmt.Fprintf(env.IO.ErrOut, "applied; rolls back at %s unless you run: virt net confirm\n", pending.Deadline.Local().Format(time.TimeOnly))
	return render(env.IO.Out, env.Output, map[string]any{"result": res, "pending": pending}, func(w io.Writer) error {
		for _, s := range res.Steps {
			fmt.Fprintf(w, "%s\n", s)
		}
		fmt.Fprintf(w, "pending until %s\n", pending.Deadline.Local().Format(time.RFC3339))
		return nil
	})
}

func newNetConfirmCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "confirm",
		Short: "Keep the network configuration being tried",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := netcfg.ConfirmDesired(env.Layout()); err != nil {
				return err
			}
			fmt.Fprintln(env.IO.ErrOut, "network configuration confirmed")
			return nil
		},
	}
}

func newNetRollbackCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "rollback",
		Short: "Undo the network configuration being tried, now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := netcfg.RollbackDesired(cmd.Context(), env.Layout()); err != nil {
				return err
			}
			fmt.Fprintln(env.IO.ErrOut, "network configuration rolled back")
			return nil
		},
	}
}

func newNetStatusCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show a pending network try and its deadline",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := netcfg.PendingTry(env.Layout())
			if errors.Is(err, netcfg.ErrNoPendingTry) {
				os.Remove(netcfg.DesiredPendingFile(env.Layout())) // a try the watchdog already rolled back
				return render(env.IO.Out, env.Output, map[string]any{"pending": nil}, func(w io.Writer) error {
					fmt.Fprintln(w, "no network change pending")
					return nil
				})
			}
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, map[string]any{"pending": p}, func(w io.Writer) error {
				fmt.Fprintf(w, "pending: rolls back at %s (in %s) unless confirmed\n", p.Deadline.Local().Format(time.RFC3339), time.Until(p.Deadline).Round(time.Second))
				return nil
			})
		},
	}
}
