package cli

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/host"
)

func newHostBootCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "boot",
		Short: "Bring the host up as it was: roll back an interrupted network try, apply the network, start the autostart VMs",
		Long: `Run once at boot (virtcon-guests.service), and safe to run again at any time:

  1. a network try the host went down with is rolled back;
  2. the applied network configuration is applied again (bridges, VLANs,
     NAT networks with dnsmasq and nftables, the management DHCP client);
  3. the VMs with spec.autostart start (with onBoot: restore in host.yaml,
     also those the last clean shutdown found running), by
     spec.startup.order then name, each after its spec.startup.delay and
     the policy's startDelay; a VM that runs already is left alone, one
     that fails is reported and the rest go on;
  4. what it did is recorded in /var/lib/virtcon/boot.json (virt host status).

A host.yaml that does not admit is refused with its field and value: the
network is still brought up, but no VM is started. The exit code is then 2;
it is 1 when the network or a VM start failed. See docs/host.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rec, err := env.Host().Boot(cmd.Context(), host.BootOptions{})
			if rec == nil {
				return err
			}
			fmt.Fprintln(textOnly{env.IO.ErrOut}, bootSummary(rec)) // VM names and errors are host text
			if rerr := render(env.IO.Out, env.Output, rec, func(w io.Writer) error { return writeBootRecord(w, rec) }); rerr != nil {
				return rerr
			}
			return err
		},
	}
}

func newHostStatusCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the host policy in effect, what the last boot did and what the last shutdown found running",
		Long: `Show the host's lifecycle: the policy in effect (/etc/virtcon/host.yaml, or the
defaults without it) and any problem with it, the record of the last
virt host boot (the network, and each VM it was to start, with its outcome,
start time and error), and the record of the last virt host shutdown-guests.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st := env.Host().Status()
			return render(env.IO.Out, env.Output, st, func(w io.Writer) error { return writeHostStatus(w, st) })
		},
	}
}

// bootSummary is the record in one line: "boot 09:12: network applied (4
// steps), 3 of 4 VMs started, 1 failed: db-01: …".
func bootSummary(rec *host.BootRecord) string {
	parts := []string{"network " + bootNetWords(rec.Network)}
	t := rec.Tally()
	switch {
	case rec.PolicyError != "":
		parts = append(parts, "no VM started: host.yaml refused: "+rec.PolicyError)
	case rec.VMsError != "":
		parts = append(parts, rec.VMsError)
	case t.Wanted == 0:
		parts = append(parts, "no VM to start")
	default:
		vms := fmt.Sprintf("%d of %d VMs started", t.Started, t.Wanted-t.AlreadyRunning)
		if t.AlreadyRunning > 0 {
			vms = fmt.Sprintf("%d of %d VMs started (%d running already)", t.Started, t.Wanted-t.AlreadyRunning, t.AlreadyRunning)
			if t.Started == 0 && t.Failed == 0 && t.NotStarted == 0 {
				vms = fmt.Sprintf("all %d VMs running already", t.AlreadyRunning)
			}
		}
		parts = append(parts, vms)
		if t.Failed > 0 {
			parts = append(parts, fmt.Sprintf("%d failed: %s: %s", t.Failed, t.FirstFailed.Name, t.FirstFailed.Error))
		}
		if t.NotStarted > 0 {
			parts = append(parts, fmt.Sprintf("%d not started: %s", t.NotStarted, firstNotStarted(rec)))
		}
	}
	if t.MarkedStopped > 0 {
		parts = append(parts, fmt.Sprintf("%d marked stopped (not autostart)", t.MarkedStopped))
	}
	return "boot " + rec.Time.Local().Format("15:04") + ": " + strings.Join(parts, ", ")
}

// firstNotStarted is the first VM the boot did not start, and why.
func firstNotStarted(rec *host.BootRecord) string {
	for _, v := range rec.VMs {
		if v.Outcome == host.BootNotStarted {
			return v.Name + ": " + v.Note
		}
	}
	return ""
}

func bootNetWords(n host.BootNetwork) string {
	var s string
	switch n.Result {
	case host.NetApplied:
		s = "applied (1 step)"
		if len(n.Steps) != 1 {
			s = fmt.Sprintf("applied (%d steps)", len(n.Steps))
		}
	case host.NetUnchanged:
		s = "up (nothing to change)"
	case host.NetNone:
		s = "not configured (nothing applied on this host yet)"
	case host.NetOnTrial:
		s = "left to the change on trial"
	case host.NetFailed:
		s = "FAILED: " + n.Error
	default:
		s = n.Result
	}
	if n.RolledBack != nil {
		s += "; rolled back try " + n.RolledBack.ID + " first (" + n.RolledBack.Why + ")"
	}
	return s
}

func policyWords(p *host.Policy) string {
	return fmt.Sprintf("onBoot %s, onShutdown %s, shutdownTimeout %s, parallelShutdown %d, startDelay %s",
		p.OnBoot, p.OnShutdown, p.Timeout(), p.ParallelShutdown, p.Delay())
}

func writeBootRecord(w io.Writer, rec *host.BootRecord) error {
	fmt.Fprintf(w, "Boot:\t%s (took %s)%s\n", rec.Time.Local().Format(time.DateTime), rec.Finished.Sub(rec.Time).Round(time.Millisecond),
		map[bool]string{true: ", first run of this boot"}[rec.FirstOfBoot])
	if rec.PolicyError != "" {
		fmt.Fprintf(w, "Policy:\tREFUSED: %s: no VM started (fix it, then run virt host boot again)\n", rec.PolicyError)
	} else if rec.Policy != nil {
		fmt.Fprintf(w, "Policy:\t%s\n", policyWords(rec.Policy))
	}
	if rec.PreviousError != "" {
		fmt.Fprintf(w, "Previous boot:\tits record is unreadable, so this run acted on no shutdown record and marked no VM stopped: %s\n", rec.PreviousError)
	}
	fmt.Fprintf(w, "Network:\t%s\n", bootNetWords(rec.Network))
	for _, s := range rec.Network.Steps {
		fmt.Fprintf(w, "\t  %s\n", s)
	}
	if rec.Network.Note != "" {
		fmt.Fprintf(w, "\t%s\n", rec.Network.Note)
	}
	if s := rec.Shutdown; s != nil {
		fmt.Fprintf(w, "Shutdown record:\t%s\n", shutdownUseWords(s))
	}
	for _, s := range rec.Skipped {
		fmt.Fprintf(w, "Skipped:\t%s: %s\n", s.UID, s.Why)
	}
	if rec.VMsError != "" {
		fmt.Fprintf(w, "VMs:\t%s\n", rec.VMsError)
		return nil
	}
	if len(rec.VMs) == 0 {
		fmt.Fprintf(w, "VMs:\tnone to start (no VM has autostart)\n")
		return nil
	}
	fmt.Fprintln(w, "\nNAME\tWHY\tORDER\tDELAY\tOUTCOME\tSTARTED\tTOOK\tNOTE")
	for _, v := range rec.VMs {
		at := "-"
		if v.StartedAt != nil {
			at = v.StartedAt.Local().Format("15:04:05.000")
		}
		took := "-"
		if v.StartedAt != nil {
			took = v.Took.String()
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", v.Name, dash(v.Why), v.Order, v.Delay, v.Outcome, at, took, dash(cmp.Or(v.Error, v.Note)))
	}
	return nil
}

func shutdownUseWords(s *host.BootShutdown) string {
	switch {
	case s.Error != "" && s.Note != "":
		return "unreadable, nothing restored from it (" + s.Note + "): " + s.Error
	case s.Error != "":
		return "unreadable, nothing restored from it: " + s.Error
	case s.Used:
		return fmt.Sprintf("of %s, %d VMs running then: started again", s.Time.Local().Format(time.DateTime), s.Running)
	}
	return fmt.Sprintf("of %s, %d VMs running then: not used (%s)", s.Time.Local().Format(time.DateTime), s.Running, s.Note)
}

func writeHostStatus(w io.Writer, st *host.Status) error {
	switch {
	case st.PolicyError != "":
		fmt.Fprintf(w, "Policy:\tREFUSED: %s\n\tvirt host boot brings the network up but starts no VM until it is fixed\n", st.PolicyError)
	case !st.PolicyFromFile:
		fmt.Fprintf(w, "Policy:\tthe defaults (no %s): %s\n", st.PolicyFile, policyWords(st.Policy))
	default:
		fmt.Fprintf(w, "Policy:\t%s: %s\n", st.PolicyFile, policyWords(st.Policy))
	}
	switch {
	case st.BootError != "":
		fmt.Fprintf(w, "Last boot:\tunreadable: %s\n", st.BootError)
	case st.Boot == nil:
		fmt.Fprintf(w, "Last boot:\tnone recorded (virt host boot has not run)\n")
	default:
		note := ""
		if !st.BootOfThisBoot {
			note = " (in an earlier boot: virt host boot has not run since the host booted)"
		}
		fmt.Fprintf(w, "Last boot:\t%s%s\n", bootSummary(st.Boot), note)
	}
	switch {
	case st.ShutdownError != "":
		fmt.Fprintf(w, "Last shutdown:\tunreadable: %s\n", st.ShutdownError)
	case st.Shutdown == nil:
		fmt.Fprintf(w, "Last shutdown:\tnone recorded (virt host shutdown-guests has not run)\n")
	default:
		s := st.Shutdown
		fmt.Fprintf(w, "Last shutdown:\t%s: %d VMs running, onShutdown %s\n", s.Time.Local().Format(time.DateTime), len(s.Running), dash(s.OnShutdown))
	}
	if st.Boot != nil {
		fmt.Fprintln(w)
		return writeBootRecord(w, st.Boot)
	}
	return nil
}
