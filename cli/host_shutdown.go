package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/fielderr"
)

// ErrGuestsLeft: some VMs could not be taken down (the report says which).
var ErrGuestsLeft = errors.New("some VMs could not be stopped")

func newHostShutdownGuestsCmd(env *Env) *cobra.Command {
	var (
		timeout  time.Duration
		parallel int
	)
	cmd := &cobra.Command{
		Use:   "shutdown-guests",
		Short: "Take the running VMs down before the host goes down: ACPI power-off in parallel, or save, or quit (host.yaml)",
		Long: `Run before the host goes down (virtcon-guests.service's ExecStop; virt host
reboot and poweroff run it first too). What it does is the host policy's
onShutdown (/etc/virtcon/host.yaml; docs/host.md):

  shutdown  (default) press every guest's ACPI power button, --parallel at a
            time (a paused guest is resumed first); all share one deadline,
            --timeout from the start: a guest whose turn comes late gets what
            is left, and QEMU is told to quit for those still up then;
  save      save each guest's RAM and device state to disk (phase Saved; its
            next start resumes it), --parallel at a time; a guest whose save
            fails, or is not done by the deadline less a third of the
            timeout (at most 30s), is powered off by ACPI in that time
            instead, and quit at the deadline;
  kill      quit every QEMU at once.

The VMs go down by spec.startup.order, highest first (the boot's order
reversed): each order's VMs are down before the next order's begin, and
within one order they go down --parallel at a time, all under the one
deadline.

First it marks the host as shutting down (/run/virtcon/shutting-down.json):
a virt host boot under way starts no more VMs, and virt host boot starts
none until the host reboots. Before it stops anything it records which VMs run in
/var/lib/virtcon/shutdown.json (onBoot: restore starts them again at the next
boot), and completes the record with each VM's outcome and time. Guests that
virtcon does not manage are not touched. A host.yaml that does not load is
reported and the defaults are used: a broken policy file does not leave the
guests to die hard. Exit code 1 when a VM could not be stopped.`,
		Example: `  virt host shutdown-guests
  virt host shutdown-guests --timeout 2m --parallel 8 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("timeout") && timeout < time.Second {
				return &UsageError{fmt.Errorf("--timeout %s: must be at least 1s", timeout)}
			}
			if cmd.Flags().Changed("parallel") && parallel < 1 {
				return &UsageError{fmt.Errorf("--parallel %d: must be at least 1", parallel)}
			}
			rep, err := env.Host().ShutdownGuests(cmd.Context(), host.ShutdownOptions{
				Timeout: timeout, Parallel: parallel, Progress: env.shutdownProgress(),
			})
			if rep == nil {
				return shutdownFlags(err)
			}
			fmt.Fprintln(env.IO.ErrOut, shutdownSummary(rep))
			if rerr := render(env.IO.Out, env.Output, rep, func(w io.Writer) error { return writeShutdownReport(w, rep) }); rerr != nil {
				return rerr
			}
			if err != nil {
				return err
			}
			if n := rep.Count(host.ShutdownFailed) + rep.Count(host.ShutdownSkipped); n > 0 {
				return fmt.Errorf("shutdown-guests: %w: %d still running (they die with the host)", ErrGuestsLeft, n)
			}
			return nil
		},
	}
	durationFlag(cmd.Flags(), &timeout, "timeout", 0, "one deadline for all guests (default: host.yaml's shutdownTimeout, 300s)")
	cmd.Flags().IntVar(&parallel, "parallel", 0, "how many guests go down at once (default: host.yaml's parallelShutdown, 4)")
	return cmd
}

// shutdownFlags names the option errors by the flags that set them.
func shutdownFlags(err error) error {
	var ve *fielderr.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	var msgs []string
	for _, fe := range ve.Errs {
		field := map[string]string{"timeout": "--timeout", "parallel": "--parallel"}[fe.Field]
		if field == "" {
			field = "host.yaml " + fe.Field
		}
		msgs = append(msgs, fielderr.Format(field, fe.Value, fe.Msg))
	}
	return &UsageError{fmt.Errorf("%w: %s", host.ErrInvalidShutdown, strings.Join(msgs, "; "))}
}

// shutdownProgress prints each VM's turn on stderr as it begins and ends.
func (e *Env) shutdownProgress() func(host.ShutdownProgress) {
	var mu sync.Mutex
	return func(p host.ShutdownProgress) {
		mu.Lock()
		defer mu.Unlock()
		if p.VM.Outcome == "" {
			fmt.Fprintf(textOnly{e.IO.ErrOut}, "%s: going down…\n", p.VM.Name)
			return
		}
		fmt.Fprintf(textOnly{e.IO.ErrOut}, "%s: %s in %s (%d of %d)\n", p.VM.Name, outcomeWords(p.VM.Outcome), p.VM.Took.D().Round(100*time.Millisecond), p.Done, p.Total)
	}
}

func outcomeWords(o string) string {
	switch o {
	case host.ShutdownPoweredOff:
		return "powered off by ACPI"
	case host.ShutdownQuit:
		return "quit"
	case host.ShutdownKilled:
		return "killed (answered neither the power button nor quit)"
	case host.ShutdownSaved:
		return "saved"
	case host.ShutdownGone:
		return "already stopped"
	case host.ShutdownFailed:
		return "FAILED"
	case host.ShutdownSkipped:
		return "skipped"
	}
	return o
}

// shutdownSummary is the one line on stderr after a shutdown.
func shutdownSummary(r *host.ShutdownReport) string {
	n := len(r.Outcomes)
	if n == 0 {
		s := "shutdown-guests: no VM was running"
		if r.RecordKept {
			s += " (the record of this boot's earlier shutdown is kept)"
		}
		if r.PolicyError != "" {
			s += "; host.yaml not loaded, defaults used: " + r.PolicyError
		}
		if r.LockError != "" {
			s += "; " + r.LockError
		}
		return s
	}
	var parts []string
	for _, o := range []string{host.ShutdownPoweredOff, host.ShutdownSaved, host.ShutdownQuit, host.ShutdownKilled, host.ShutdownGone, host.ShutdownFailed, host.ShutdownSkipped} {
		if c := r.Count(o); c > 0 {
			w := outcomeWords(o)
			if o == host.ShutdownQuit && r.OnShutdown != host.OnShutdownKill {
				w = "quit at the deadline"
			}
			parts = append(parts, fmt.Sprintf("%d %s", c, w))
		}
	}
	vms := "VMs"
	if n == 1 {
		vms = "VM"
	}
	s := fmt.Sprintf("shutdown-guests (%s, %s timeout, %d at once): %d %s in %s: %s", r.OnShutdown, r.Timeout, r.Parallel, n, vms,
		r.Took.D().Round(100*time.Millisecond), strings.Join(parts, ", "))
	if r.PolicyError != "" {
		s += "; host.yaml not loaded, defaults used: " + r.PolicyError
	}
	if r.LockError != "" {
		s += "; " + r.LockError
	}
	return s
}

func writeShutdownReport(w io.Writer, r *host.ShutdownReport) error {
	fmt.Fprintln(w, "NAME\tOUTCOME\tTOOK\tNOTE")
	for _, o := range r.Outcomes {
		note := o.Error
		if note == "" {
			note = o.Note
		}
		if o.SavedBytes > 0 {
			note = strings.TrimPrefix(note+"; ", "; ") + fmt.Sprintf("%s written", humanBytes(o.SavedBytes))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", dash(o.Name), o.Outcome, o.Took.D().Round(100*time.Millisecond), dash(note))
	}
	return nil
}
