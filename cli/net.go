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
func (e *Env) networkFile() string { return e.net().DesiredFile() }

// net is the network service every net command goes through.
func (e *Env) net() *netcfg.Service { return e.Host().Net }

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
	wordNetCmds(cmd)
	return cmd
}

// wordNetCmds has every net command's error worded by wordNet.
func wordNetCmds(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error { return wordNet(run(cmd, args)) }
		}
		wordNetCmds(c)
	}
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
	return wordTryPending(env.net().CheckNoPendingTry())
}

// resolveExpiredTry is netcfg.ResolveExpiredTry, told on stderr. A
// failure is a warning: the command goes on, and one that changes the
// network is refused since the try stays pending.
func resolveExpiredTry(cmd *cobra.Command, env *Env) {
	r, err := env.net().ResolveExpiredTry(cmd.Context())
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

// wordNet adds to netcfg's errors what the CLI user can do about them,
// in the CLI's commands and flags: the core's errors carry the facts
// (the deadline asked for and the least one, the try and why it cannot
// be kept, the fields of the default-route rule). Each worded error keeps
// the original in its chain, for errors.Is/As and the exit code.
func wordNet(err error) error {
	if err == nil {
		return nil
	}
	var (
		short   *netcfg.DeadlineTooShortError
		overrun *netcfg.TryOverrunError
		ended   *netcfg.NotConfirmableError
		tried   *netcfg.TriedFileError
		unkept  *netcfg.UnkeepableTryError
		invalid *netcfg.ValidationError
	)
	if errors.As(err, &short) {
		msg := fmt.Sprintf("%v: --try %v is shorter than the %v needed to apply and verify; use --try %v or longer",
			netcfg.ErrDeadlineTooShort, short.Got, short.Min, short.Min)
		if short.STP > 0 {
			msg = fmt.Sprintf("%v: --try %v is shorter than %v: STP on the bridges involved takes %v (2 × forward delay) before ports forward, plus %v to apply and verify; use --try %v or longer",
				netcfg.ErrDeadlineTooShort, short.Got, short.Min, short.STP, short.Margin, short.Min)
		}
		err = reword(err, short, msg)
	}
	if errors.As(err, &overrun) {
		err = reword(err, overrun, overrun.Error()+"; use a longer --try")
	}
	if errors.As(err, &ended) {
		if ended.RollbackError != "" {
			err = reword(err, ended, ended.Error()+"; run `virt net rollback` to retry the rollback")
		} else {
			err = reword(err, ended, ended.Error()+"; if it stays pending, run `virt net rollback` to retry the rollback")
		}
	}
	if errors.As(err, &tried) {
		err = reword(err, tried, tried.Error()+"; run `virt net rollback` and try again")
	}
	if errors.As(err, &unkept) {
		err = reword(err, unkept, fmt.Sprintf("try started, but recording %s failed, so it cannot be kept (it rolls back at the deadline, or now with `virt net rollback`): %v",
			unkept.Path, unkept.Err))
	}
	if errors.As(err, &invalid) && errors.Is(invalid.Kind, netcfg.ErrInvalid) {
		words := &netcfg.ValidationError{Kind: invalid.Kind, Errs: make([]*netcfg.FieldError, len(invalid.Errs))}
		for i, fe := range invalid.Errs {
			words.Errs[i] = wordNeedsTry(fe)
		}
		err = reword(err, invalid, words.Error())
	}
	return err
}

// wordNeedsTry says how to make a change that the default-route rule
// refuses: with --try.
func wordNeedsTry(fe *netcfg.FieldError) *netcfg.FieldError {
	const how = "apply with --try, which rolls back unless confirmed"
	c := *fe
	switch {
	case errors.Is(fe, netcfg.ErrPortCarriesDefaultRoute):
		c.Msg += ": " + how
	case errors.Is(fe, netcfg.ErrChangesDefaultRoute):
		c.Msg += "; " + how
	}
	return &c
}

// worded is an error whose text the CLI has worded; the error it words
// stays in the chain.
type worded struct {
	msg string
	err error
}

func (w *worded) Error() string { return w.msg }
func (w *worded) Unwrap() error { return w.err }

// reword returns err with the text of inner, an error in its chain,
// replaced by text (err itself when its text does not show inner's).
func reword(err, inner error, text string) error {
	msg, old := err.Error(), inner.Error()
	if old == text || !strings.Contains(msg, old) {
		return err
	}
	return &worded{msg: strings.Replace(msg, old, text, 1), err: err}
}

func newNetShowCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show what applying network.yaml would change on the live host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := env.net().PlanDesired(cmd.Context())
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
// (on confirm, for a try): Service.ApplyDesired, rendered.
func applyNetwork(cmd *cobra.Command, env *Env, cfg *netcfg.Config, data []byte, try time.Duration, dryRun bool) error {
	res, pending, err := env.net().ApplyDesired(cmd.Context(), cfg,
		netcfg.DesiredOptions{Try: try, DryRun: dryRun, Data: data})
	return renderApplied(env, res, pending, err, dryRun)
}

// renderApplied renders what an apply did (or, in a dry run, would do),
// or its error worded.
func renderApplied(env *Env, res *netcfg.Result, pending *netcfg.Pending, err error, dryRun bool) error {
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
			if err := env.net().ConfirmDesired(cmd.Context()); err != nil {
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
			if err := env.net().RollbackDesired(cmd.Context()); err != nil {
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
			p, err := env.net().PendingTry()
			if err != nil {
				return err
			}
			if p == nil {
				// a try the watchdog already rolled back leaves its tried file
				if err := env.net().DropStalePending(cmd.Context()); err != nil {
					env.Logger.Debug("stale tried file not removed", "err", err)
				}
				return render(env.IO.Out, env.Output, map[string]any{"pending": nil}, func(w io.Writer) error {
					fmt.Fprintln(w, "no network change pending")
					return nil
				})
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
