package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
)

func newVMNICCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nic",
		Short: "Add and detach a VM's NICs, running (hot-plug) or stopped",
		Long: `Add and detach a VM's NICs. On a running VM the change is made at once: the
NIC's TAP is made on its bridge and the NIC hot-plugged (or unplugged, with
the guest's acknowledgement, and its TAP removed); on a stopped VM only the
spec changes, for its next start. A paused or unresponsive VM is refused.`,
	}
	cmd.AddCommand(newVMNICAddCmd(env), newVMNICDetachCmd(env))
	return cmd
}

func newVMNICAddCmd(env *Env) *cobra.Command {
	var o vm.NICAddOptions
	cmd := &cobra.Command{
		Use:   "add VM (--network NETWORK | --bridge BRIDGE) [--mac MAC] [--model virtio|e1000]",
		Short: "Add a NIC on a VM network or a host bridge",
		Long: `Add a NIC on a VM network (virt net: a NAT network's DHCP gives it an
address) or on a host bridge. Its MAC (--mac, or a generated one unique on
the VM) is written into the spec.`,
		Example: `  virt vm nic add web --network default
  virt vm nic add web --bridge br0 --mac 52:54:00:12:34:56 --model e1000`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (o.Network == "") == (o.Bridge == "") {
				return &UsageError{fmt.Errorf("give exactly one of --network or --bridge")}
			}
			res, err := env.hotplugs().AddNIC(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			return renderHotplug(env, res, "NIC "+res.Device+" added")
		},
	}
	cmd.Flags().StringVar(&o.Network, "network", "", "VM network (network.yaml) to put the NIC on")
	cmd.Flags().StringVar(&o.Bridge, "bridge", "", "host bridge to put the NIC on")
	cmd.Flags().StringVar(&o.MAC, "mac", "", "the NIC's MAC (default: generated, unique on the VM)")
	cmd.Flags().StringVar(&o.Model, "model", "virtio", "NIC model: virtio or e1000")
	return cmd
}

func newVMNICDetachCmd(env *Env) *cobra.Command {
	var o vm.NICDetachOptions
	cmd := &cobra.Command{
		Use:   "detach VM MAC|INDEX",
		Short: "Remove a NIC (by MAC, or index in spec.network) from a VM",
		Long: `Remove a NIC, named by its MAC or its index in spec.network (virt vm show). A
running guest must acknowledge the unplug within --timeout, or nothing
changes. The other NICs keep their MACs (written into the spec) and move up
one index; on a running VM their TAPs are renamed to match, a blip of their
link.`,
		Example: `  virt vm nic detach web 52:54:00:12:34:56
  virt vm nic detach web 1`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Timeout <= 0 {
				return &UsageError{fmt.Errorf("--timeout %s: must be more than 0", o.Timeout)}
			}
			res, err := env.hotplugs().DetachNIC(cmd.Context(), args[0], args[1], o)
			if err != nil {
				return err
			}
			return renderHotplug(env, res, "NIC "+res.Device+" detached")
		},
	}
	durationFlag(cmd.Flags(), &o.Timeout, "timeout", vm.DefaultUnplugTimeout, "how long a running guest has to acknowledge the unplug")
	return cmd
}
