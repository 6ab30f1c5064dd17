package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/netcfg"
)

// networkFile is the desired host network under --root.
func (e *Env) networkFile() string { return netcfg.DesiredFile(e.Layout()) }

// Annotations of the net commands, read by the net command's pre-run.
const (
	// annNetChanges marks a command that changes the network: refused
	// while a try is pending (a --dry-run excepted).
	annNetChanges = "virtcon/net-changes"
	// annNetOwnRollback marks `net rollback`, which rolls back an expired
	// try itself rather than have the pre-run do it first.
	annNetOwnRollback = "virtcon/net-own-rollback"
)

func newNetCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Host networking: bridges, VLANs, VM networks; applied by netlink with automatic rollback",
		// Replaces the root's pre-run (cobra runs the nearest one), so it
		// runs env.setup first.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := env.setup(cmd); err != nil {
				return err
			}
			return netPreRun(cmd, env)
		},
	}
	cmd.AddCommand(newNetShowCmd(env), newNetApplyCmd(env), newNetConfirmCmd(env), newNetRollbackCmd(env), newNetStatusCmd(env),
		newNetBridgeCmd(env), newNetNATCmd(env), newNetTestCmd(env), newNetResetDHCPCmd(env))
	return cmd
}

// netPreRun runs before every `virt net` command: it rolls back an
// expired try whose watchdog is gone, saying so on stderr, and refuses a
// command that changes the network while a try is pending.
func netPreRun(cmd *cobra.Command, env *Env) error {
	if cmd.Annotations[annNetOwnRollback] == "" {
		resolveExpiredTry(cmd, env)
	}
	if cmd.Annotations[annNetChanges] == "" {
		return nil
	}
	if f := cmd.Flags().Lookup("dry-run"); f != nil && f.Value.String() == "true" {
		return nil
	}
	return wordTryPending(netcfg.CheckNoPendingTry(env.Layout()))
}

// resolveExpiredTry is netcfg.ResolveExpiredTry, told on stderr. A
// failure is a warning: the command goes on, and one that changes the
// network is refused since the try stays pending.
func resolveExpiredTry(cmd *cobra.Command, env *Env) {
	r, err := netcfg.ResolveExpiredTry(cmd.Context(), env.Logger, env.Layout())
	w := textOnly{env.IO.ErrOut}
	switch {
	case errors.Is(err, netcfg.ErrTryBusy):
		// not now: the lock's holder is at the try (and a change is
		// refused below while it stays pending)
	case r != nil && err != nil:
		fmt.Fprintf(w, "virt: warning: network try %s expired at %s and %s, but rolling it back failed: %v; run `virt net rollback` to retry\n",
			r.ID, r.Deadline.Local().Format(time.TimeOnly), r.Why, err)
	case err != nil:
		fmt.Fprintf(w, "virt: warning: cannot check for an expired network try: %v\n", err)
	case r != nil:
		what := "nothing to restore"
		if len(r.Links) > 0 {
			what = "restored " + strings.Join(r.Links, ", ")
		}
		fmt.Fprintf(w, "virt: network try %s expired at %s and %s: rolled it back (%s)\n",
			r.ID, r.Deadline.Local().Format(time.TimeOnly), r.Why, what)
	}
}

// wordTryPending adds to a refusal because a try is pending what the
// operator can do about it.
func wordTryPending(err error) error {
	var tp *netcfg.TryPendingError
	switch {
	case !errors.As(err, &tp):
		return err
	case tp.Err != nil:
		return err // says the record cannot be read, and where
	case tp.RollbackError != "":
		// nothing but a live watchdog retries a failed rollback by itself
		return fmt.Errorf("%w; run `virt net rollback` to retry the rollback, then run this again", err)
	case tp.Expired:
		return fmt.Errorf("%w; wait for it, or run `virt net rollback` to retry the rollback now, then run this again", err)
	}
	return fmt.Errorf("%w; keep it with `virt net confirm` or undo it with `virt net rollback`, then run this again", err)
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
Enslaving the interface that carries the default route needs --try; a
--dry-run of such a change prints its steps and says that the apply would be
refused (exit 2, like the apply). While a try is pending every apply is
refused (a --dry-run excepted): confirm or roll back first.`,
		Args:        cobra.NoArgs,
		Annotations: map[string]string{annNetChanges: "true"},
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
	durationFlag(cmd.Flags(), &try, "try", 0, "roll back after this long unless confirmed (e.g. 60s)")
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
	if dryRun && res != nil && err != nil {
		// The plan the rule refuses: shown, and the refusal returned, so
		// the dry run exits as the apply would.
		if rerr := renderSteps(env, res); rerr != nil {
			return rerr
		}
		return fmt.Errorf("the apply would be refused: %w", err)
	}
	if err != nil {
		return wordTryPending(err)
	}
	if pending == nil {
		return renderSteps(env, res)
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

// renderSteps prints an apply's (or a dry run's) steps.
func renderSteps(env *Env, res *netcfg.Result) error {
	return render(env.IO.Out, env.Output, res, func(w io.Writer) error {
		for _, s := range res.Steps {
			fmt.Fprintf(w, "%s\n", s)
		}
		fmt.Fprintf(w, "%d changes\n", len(res.Steps))
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
		// an expired try is this command's to roll back
		Annotations: map[string]string{annNetOwnRollback: "true"},
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
			running := p.WatchdogRunning()
			return render(env.IO.Out, env.Output, map[string]any{"pending": p, "watchdogRunning": running}, func(w io.Writer) error {
				at := p.Deadline.Local().Format(time.RFC3339)
				switch left := p.Remaining(time.Now()); {
				case p.RollbackError != "":
					fmt.Fprintf(w, "pending: rolling back failed: %s; run `virt net rollback` to retry\n", p.RollbackError)
				case left == 0 && running:
					fmt.Fprintf(w, "pending: the deadline %s has passed; the watchdog is rolling it back\n", at)
				case left == 0:
					// the pre-run could not tell whether the watchdog lives
					fmt.Fprintf(w, "pending: the deadline %s has passed, and its watchdog (pid %d) may not be running; run `virt net rollback`\n", at, p.WatchdogPID)
				case running:
					fmt.Fprintf(w, "pending: rolls back at %s (in %s) unless confirmed\n", at, left.Round(time.Second))
				default:
					fmt.Fprintf(w, "pending: until %s (in %s) unless confirmed; its watchdog (pid %d) is not running, so the first `virt net` command after the deadline rolls it back\n",
						at, left.Round(time.Second), p.WatchdogPID)
				}
				return nil
			})
		},
	}
}
