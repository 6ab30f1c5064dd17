package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/netcfg"
)

// desiredNetwork is the configuration the imperative commands edit: the
// desired file, else the applied one, else an empty one.
func desiredNetwork(env *Env) (*netcfg.Config, error) { return env.net().LoadDesired() }

// applyEdited applies an edited configuration like `virt net apply -f`
// (ApplyDesired puts it through the same admission as a file).
func applyEdited(cmd *cobra.Command, env *Env, cfg *netcfg.Config, try time.Duration) error {
	return applyNetwork(cmd, env, cfg, nil, try, false)
}

func newNetBridgeCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{Use: "bridge", Short: "Create, delete and list bridges (edits network.yaml and applies it)"}
	var (
		ports, addrs []string
		stp          bool
		mtu          int
		try          time.Duration
	)
	create := &cobra.Command{
		Use:         "create NAME [--port IF]... [--address CIDR]...",
		Short:       "Add a bridge to network.yaml and apply it",
		Annotations: map[string]string{annNetChanges: "true"},
		Args:        cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := desiredNetwork(env)
			if err != nil {
				return err
			}
			cfg, err = netcfg.AddBridge(cfg, netcfg.Bridge{Name: args[0], Ports: ports, STP: stp, MTU: mtu, Addresses: addrs})
			if errors.Is(err, netcfg.ErrBridgeExists) {
				return &UsageError{fmt.Errorf("bridge %q is already in %s", args[0], env.networkFile())}
			} else if err != nil {
				return err
			}
			return applyEdited(cmd, env, cfg, try)
		},
	}
	create.Flags().StringArrayVar(&ports, "port", nil, "uplink port (repeatable); its addresses and routes move to the bridge")
	create.Flags().StringArrayVar(&addrs, "address", nil, "address in CIDR form (repeatable)")
	create.Flags().BoolVar(&stp, "stp", false, "spanning tree")
	create.Flags().IntVar(&mtu, "mtu", 0, "MTU (default: the kernel's)")
	durationFlag(create.Flags(), &try, "try", 0, "roll back after this long unless `virt net confirm`")
	var delTry time.Duration
	del := &cobra.Command{
		Use:         "delete NAME",
		Short:       "Remove a bridge from network.yaml and apply it (its ports are released)",
		Annotations: map[string]string{annNetChanges: "true"},
		Args:        cobra.ExactArgs(1),
		ValidArgsFunction: configNames(env, func(c *netcfg.Config) (out []string) {
			for _, b := range c.Bridges {
				out = append(out, b.Name)
			}
			return out
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := desiredNetwork(env)
			if err != nil {
				return err
			}
			cfg, err = netcfg.DeleteBridge(cfg, args[0])
			var inUse *netcfg.BridgeInUseError
			switch {
			case errors.Is(err, netcfg.ErrNoSuchBridge):
				return fmt.Errorf("bridge %q is not in %s (virtcon deletes only bridges it made)", args[0], env.networkFile())
			case errors.As(err, &inUse):
				return &UsageError{err}
			case err != nil:
				return err
			}
			return applyEdited(cmd, env, cfg, delTry)
		},
	}
	durationFlag(del.Flags(), &delTry, "try", 0, "roll back after this long unless `virt net confirm`")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the host's bridges with their ports and addresses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rows, err := env.net().Bridges(cmd.Context())
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, rows, func(w io.Writer) error {
				fmt.Fprintln(w, "NAME\tPORTS\tADDRESSES\tMTU\tUP\tSTP\tMANAGED")
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%t\t%t\t%t\n", r.Name, dash(strings.Join(r.Ports, ",")), dash(strings.Join(r.Addresses, ",")), r.MTU, r.Up, r.STP, r.Managed)
				}
				return nil
			})
		},
	}
	cmd.AddCommand(create, del, list)
	return cmd
}

func newNetNATCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{Use: "nat", Short: "Create and delete NAT networks for VMs (DHCP by dnsmasq, masquerading by nftables)"}
	var subnet, bridge string
	create := &cobra.Command{
		Use:         "create NAME --subnet CIDR [--bridge NAME]",
		Short:       "Add a NAT network to network.yaml and apply it",
		Annotations: map[string]string{annNetChanges: "true"},
		Args:        cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if subnet == "" {
				return &UsageError{errors.New("nat create: --subnet is required (e.g. 10.77.0.0/24)")}
			}
			cfg, err := desiredNetwork(env)
			if err != nil {
				return err
			}
			cfg, err = netcfg.AddNATNetwork(cfg, args[0], subnet, bridge)
			if errors.Is(err, netcfg.ErrNetworkExists) {
				return &UsageError{fmt.Errorf("network %q is already in %s", args[0], env.networkFile())}
			} else if err != nil {
				return err
			}
			return applyEdited(cmd, env, cfg, 0)
		},
	}
	create.Flags().StringVar(&subnet, "subnet", "", "IPv4 subnet; the bridge takes its first address, DHCP the upper half")
	create.Flags().StringVar(&bridge, "bridge", "", "bridge name (default vcnat-NAME)")
	del := &cobra.Command{
		Use:         "delete NAME",
		Short:       "Remove a NAT network (its bridge, dnsmasq and rules) and apply",
		Annotations: map[string]string{annNetChanges: "true"},
		Args:        cobra.ExactArgs(1),
		ValidArgsFunction: configNames(env, func(c *netcfg.Config) (out []string) {
			for _, n := range c.Networks {
				if n.Type == netcfg.NetworkNAT {
					out = append(out, n.Name)
				}
			}
			return out
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := desiredNetwork(env)
			if err != nil {
				return err
			}
			cfg, err = netcfg.DeleteNATNetwork(cfg, args[0])
			if errors.Is(err, netcfg.ErrNoSuchNetwork) {
				return fmt.Errorf("no nat network %q in %s", args[0], env.networkFile())
			} else if err != nil {
				return err
			}
			return applyEdited(cmd, env, cfg, 0)
		},
	}
	cmd.AddCommand(create, del)
	return cmd
}

// configNames completes the first argument from the network
// configuration the host is meant to have (network.yaml, or the file on
// trial).
func configNames(env *Env, names func(*netcfg.Config) []string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if env.Logger == nil {
			if err := env.setup(cmd); err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
		}
		cfg, err := env.net().LoadEffective()
		if err != nil || cfg == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names(cfg), cobra.ShellCompDirectiveNoFileComp
	}
}
