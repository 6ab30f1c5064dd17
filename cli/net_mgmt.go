package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/netcfg"
)

// The management network commands the DCUI's Network screen shows: test
// it, and reset it to DHCP when it was configured wrong.

func newNetTestCmd(env *Env) *cobra.Command {
	var (
		name    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "test [--name NAME]",
		Short: "Test the management network: link and carrier, addresses, gateway (ARP/NDP and ping), DNS servers",
		Long: `Test the management interface of network.yaml (else of the applied
configuration; while a try is pending, of the configuration on trial,
network.yaml.pending): its link is up with a carrier, each address is present
(with DHCP: a leased IPv4 address), the gateway answers ARP or neighbour
discovery and a ping, and each DNS server (network.yaml's, else those of
/etc/resolv.conf) answers a query. DNS servers are asked for "localhost."
by default, which resolvers answer themselves (RFC 6761), so the test works
without internet access; --name asks for a real name. Every check has its
own timeout and they run at once. Exit code 3 when any check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := env.net().LoadEffective()
			if err != nil {
				return err
			}
			rs := env.net().CheckManagement(cmd.Context(), cfg, netcfg.CheckOptions{Name: name, Timeout: timeout})
			if err := render(env.IO.Out, env.Output, rs, func(w io.Writer) error {
				fmt.Fprintln(w, "STATUS\tCHECK\tDETAIL\tTOOK")
				for _, r := range rs {
					st := env.IO.paint("32", "PASS")
					if !r.OK {
						st = env.IO.paint("1;31", "FAIL")
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%v\n", st, r.Name, r.Detail, r.Took.Round(time.Millisecond))
				}
				return nil
			}); err != nil {
				return err
			}
			if !netcfg.AllPassed(rs) {
				return ErrCheckFailed
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", `name to ask the DNS servers for (default "localhost.")`)
	durationFlag(cmd.Flags(), &timeout, "timeout", netcfg.DefaultCheckTimeout, "time limit of each check")
	return cmd
}

func newNetResetDHCPCmd(env *Env) *cobra.Command {
	var try time.Duration
	cmd := &cobra.Command{
		Use:         "reset-dhcp IFACE [--try 60s]",
		Short:       "Make the management interface DHCP on the NIC IFACE (no static address, gateway or VLAN) and apply on trial",
		Annotations: map[string]string{annNetChanges: "true"},
		Long: `Reset the management network of network.yaml to DHCP on the NIC IFACE,
dropping its static addresses, gateway, VLAN and MTU; bridges, VLANs, VM
networks, DNS and the host name stay. IFACE must exist and must not be a port
of a bridge of the file.

Switching the management interface can cut off the session that runs this
command, so the change is always a try (--try, 60s by default; 0 is refused):
it rolls back at the deadline unless 'virt net confirm' runs.

This is the way back from a broken configuration: when network.yaml cannot be
read or decoded, the reset starts from the applied configuration (else an
empty one) and says so on stderr; the confirm replaces network.yaml.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, pending, why, err := env.net().ResetDHCP(cmd.Context(), args[0], try)
			if errors.Is(err, netcfg.ErrResetNeedsTry) {
				return &UsageError{&worded{err: err, msg: fmt.Sprintf("net reset-dhcp: --try %v: the reset is always a try, since switching the management interface can cut off this session with nothing to roll it back; use --try %ds (the default) or longer",
					try, int(netcfg.DefaultResetDHCPTry/time.Second))}}
			}
			if why != "" {
				fmt.Fprintf(env.IO.ErrOut, "warning: %s\n", why)
			}
			return renderApplied(env, res, pending, err, false)
		},
	}
	durationFlag(cmd.Flags(), &try, "try", netcfg.DefaultResetDHCPTry, "roll back after this long unless 'virt net confirm' runs (must be positive)")
	return cmd
}
