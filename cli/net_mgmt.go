package cli

import (
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
configuration): its link is up with a carrier, each address is present (with
DHCP: a leased IPv4 address), the gateway answers ARP or neighbour discovery
and a ping, and each DNS server (network.yaml's, else those of
/etc/resolv.conf) answers a query. DNS servers are asked for "localhost."
by default, which resolvers answer themselves (RFC 6761), so the test works
without internet access; --name asks for a real name. Every check has its
own timeout and they run at once. Exit code 3 when any check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := netcfg.LoadDesired(env.Layout())
			if err != nil {
				return err
			}
			rs := netcfg.TestManagement(cmd.Context(), cfg, netcfg.TestOptions{Root: env.Layout().Root, Name: name, Timeout: timeout})
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
	cmd.Flags().DurationVar(&timeout, "timeout", netcfg.DefaultTestTimeout, "time limit of each check")
	return cmd
}

func newNetResetDHCPCmd(env *Env) *cobra.Command {
	var try time.Duration
	cmd := &cobra.Command{
		Use:   "reset-dhcp IFACE [--try 60s]",
		Short: "Make the management interface DHCP on the NIC IFACE (no static address, gateway or VLAN) and apply",
		Long: `Reset the management network of network.yaml to DHCP on the NIC IFACE,
dropping its static addresses, gateway, VLAN and MTU; bridges, VLANs, VM
networks, DNS and the host name stay. IFACE must exist and must not be a port
of a bridge of the file. This moves the default route, so it needs --try:
the change rolls back at the deadline unless 'virt net confirm' runs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := desiredNetwork(env)
			if err != nil {
				return err
			}
			st, err := netcfg.ReadState(cmd.Context())
			if err != nil {
				return err
			}
			cfg, err = netcfg.ResetManagementDHCP(cfg, args[0], st)
			if err != nil {
				return err
			}
			return applyEdited(cmd, env, cfg, try)
		},
	}
	cmd.Flags().DurationVar(&try, "try", 0, "roll back after this long unless `virt net confirm` (e.g. 60s)")
	return cmd
}
