package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
)

// cloneService is what `virt vm clone` asks of the VM manager.
type cloneService interface {
	Clone(ctx context.Context, src, name string, o vm.CloneOptions) (*vm.VirtualMachine, error)
	PeekVM(v *vm.VirtualMachine) *vm.Entry
}

var _ cloneService = (*vm.Manager)(nil)

// clones is the clone service: the test's fake when it has one, else the
// host's VM manager.
func (e *Env) clones() cloneService {
	if c, ok := e.vmSvc.(cloneService); ok {
		return c
	}
	return e.Host().VMs
}

func newVMCloneCmd(env *Env) *cobra.Command {
	var o vm.CloneOptions
	cmd := &cobra.Command{
		Use:   "clone SRC NEW",
		Short: "Copy a VM (its disks copied, or linked to a frozen layer of the source's with --linked)",
		Long: `Make the VM NEW from the VM SRC: the same spec and user labels, with a new UID
(so a new cloud-init instance-id: cloud-init runs again in the clone), new MACs,
its own UEFI variables and seed. The clone never shares a writable file with
its source.

Without --linked each disk is copied: a stopped source's with qemu-img, a
running one's by its QEMU (a backup job, the disks as they were at one
instant), never by reading a file in use. An overlay on a base image stays
backed by that (read-only) image.

--linked copies nothing: each of the source's disks is frozen into a
read-only layer in the source's directory, and both the source and the clone
go on on a new overlay of their own on it (a running source moves onto its
new overlays in one QMP transaction). A source with linked clones cannot be
deleted until they are.

The clone is stopped unless --start.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := env.clones()
			made, err := c.Clone(cmd.Context(), args[0], args[1], o)
			if err != nil {
				return err
			}
			e := c.PeekVM(made)
			return render(env.IO.Out, env.Output, e, func(w io.Writer) error {
				kind := "full"
				if o.Linked {
					kind = "linked"
				}
				fmt.Fprintf(w, "virtualmachine/%s cloned from %s (%s, uid %s)", e.Name, args[0], kind, e.UID)
				if e.PID > 0 {
					fmt.Fprintf(w, ", running as pid %d under %s", e.PID, e.Accel)
				}
				fmt.Fprintln(w)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&o.Linked, "linked", false, "share a frozen read-only layer of the source's disks instead of copying them")
	cmd.Flags().BoolVar(&o.Start, "start", false, "start the clone")
	return cmd
}
