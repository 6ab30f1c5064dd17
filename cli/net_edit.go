package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/netcfg"
)

// desiredNetwork is the configuration the imperative commands edit: the
// desired file, else the applied one, else an empty one.
func desiredNetwork(env *Env) (*netcfg.Config, error) { return netcfg.LoadDesired(env.Layout()) }

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
			st, err := netcfg.ReadState(cmd.Context())
			if err != nil {
				return err
			}
			managed := map[string]bool{}
			if prev, err := netcfg.LoadApplied(env.Layout()); err == nil && prev != nil {
				for _, b := range prev.Bridges {
					managed[b.Name] = true
				}
				for _, n := range prev.Networks {
					managed[n.Bridge] = true
				}
			}
			type row struct {
				Name      string   `json:"name" yaml:"name"`
				Ports     []string `json:"ports" yaml:"ports"`
				Addresses []string `json:"addresses" yaml:"addresses"`
				MTU       int      `json:"mtu" yaml:"mtu"`
				Up        bool     `json:"up" yaml:"up"`
				STP       bool     `json:"stp" yaml:"stp"`
				Managed   bool     `json:"managed" yaml:"managed"`
			}
			rows := []row{}
			for _, l := range st.Links {
				if l.Type != "bridge" {
					continue
				}
				r := row{Name: l.Name, MTU: l.MTU, Up: l.Up, STP: l.STP, Managed: managed[l.Name], Ports: []string{}, Addresses: []string{}}
				for _, p := range st.Links {
					if p.Master == l.Name {
						r.Ports = append(r.Ports, p.Name)
					}
				}
				for _, a := range l.Addresses {
					r.Addresses = append(r.Addresses, a.String())
				}
				rows = append(rows, r)
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
			if slices.ContainsFunc(cfg.Networks, func(n netcfg.Network) bool { return n.Name == args[0] }) {
				return &UsageError{fmt.Errorf("network %q is already in %s", args[0], env.networkFile())}
			}
			b := bridge
			if b == "" {
				b = "vcnat-" + args[0]
				if len(b) > 15 {
					b = b[:15]
				}
			}
			cfg.Networks = append(cfg.Networks, netcfg.Network{Name: args[0], Type: netcfg.NetworkNAT, Bridge: b, Subnet: subnet})
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
				if n.Type == "nat" {
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
			i := slices.IndexFunc(cfg.Networks, func(n netcfg.Network) bool { return n.Name == args[0] && n.Type == netcfg.NetworkNAT })
			if i < 0 {
				return fmt.Errorf("no nat network %q in %s", args[0], env.networkFile())
			}
			cfg.Networks = slices.Delete(cfg.Networks, i, i+1)
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
		cfg, err := netcfg.LoadEffective(env.Layout())
		if err != nil || cfg == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names(cfg), cobra.ShellCompDirectiveNoFileComp
	}
}
