package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
)

// hotplugService is what `virt vm disk` and `virt vm nic` ask of the VM
// manager.
type hotplugService interface {
	AddDisk(ctx context.Context, ref string, o vm.DiskAddOptions) (*vm.HotplugResult, error)
	DetachDisk(ctx context.Context, ref, disk string, o vm.DiskDetachOptions) (*vm.HotplugResult, error)
	ResizeDisk(ctx context.Context, ref, disk, size string) (*vm.HotplugResult, error)
	AddNIC(ctx context.Context, ref string, o vm.NICAddOptions) (*vm.HotplugResult, error)
	DetachNIC(ctx context.Context, ref, nic string, o vm.NICDetachOptions) (*vm.HotplugResult, error)
}

var _ hotplugService = (*vm.Manager)(nil)

// hotplugs is the hot-plug service: the test's fake when it has one, else
// the host's VM manager.
func (e *Env) hotplugs() hotplugService {
	if h, ok := e.vmSvc.(hotplugService); ok {
		return h
	}
	return e.Host().VMs
}

// renderHotplug prints what a disk or NIC change did: live, or in the
// spec for the next start.
func renderHotplug(env *Env, res *vm.HotplugResult, what string) error {
	return render(env.IO.Out, env.Output, res, func(w io.Writer) error {
		if res.Live {
			fmt.Fprintf(w, "%s: %s (running VM, in %s; generation %d)\n", res.VM, what, res.Took.Round(time.Millisecond), res.Generation)
		} else {
			fmt.Fprintf(w, "%s: %s in the spec (stopped VM: from its next start; generation %d)\n", res.VM, what, res.Generation)
		}
		return nil
	})
}

func newVMDiskCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "disk",
		Short: "Add, detach and grow a VM's disks, running (hot-plug) or stopped",
		Long: `Add, detach and grow a VM's disks. On a running VM the change is made
through QEMU's monitor at once (hot-plug: the guest sees the disk come and go,
and must acknowledge a detach); on a stopped VM only the spec (and the disk
file) changes, for its next start. A paused or unresponsive VM is refused.
Either way the spec's generation goes up.`,
	}
	cmd.AddCommand(newVMDiskAddCmd(env), newVMDiskDetachCmd(env), newVMDiskResizeCmd(env))
	return cmd
}

func newVMDiskAddCmd(env *Env) *cobra.Command {
	var o vm.DiskAddOptions
	cmd := &cobra.Command{
		Use:   "add VM (--size SIZE | --image IMAGE) [--name NAME]",
		Short: "Add a disk: blank of --size, or an overlay of --image (grown to --size)",
		Long: `Add a disk to a VM: a blank qcow2 of --size, or a qcow2 overlay backed by the
base image --image (of at least its size; --size grows it). --name names it
(default diskN): the guest sees the name as the disk's serial
(/dev/disk/by-id/virtio-NAME). A disk detached earlier with its file kept
attaches again with --name and neither --size nor --image.`,
		Example: `  virt vm disk add web --size 20G --name data
  virt vm disk add web --image debian-12 --size 10G
  virt vm disk add web --name data     # the file kept by an earlier detach`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Size == "" && o.Image == "" && o.Name == "" {
				return &UsageError{errors.New("give --size, --image, or both (or --name of a disk detached with its file kept)")}
			}
			res, err := env.hotplugs().AddDisk(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			return renderHotplug(env, res, "disk "+res.Device+" added")
		},
	}
	cmd.Flags().StringVar(&o.Size, "size", "", "size of a blank disk, or of the overlay of --image (512M, 20G)")
	cmd.Flags().StringVar(&o.Image, "image", "", "base image (virt image list) to back the disk")
	cmd.Flags().StringVar(&o.Name, "name", "", "the disk's name (default diskN)")
	return cmd
}

func newVMDiskDetachCmd(env *Env) *cobra.Command {
	var o vm.DiskDetachOptions
	cmd := &cobra.Command{
		Use:   "detach VM DISK",
		Short: "Remove a disk from a VM (its file is kept unless --delete)",
		Long: `Remove a disk from a VM. A running guest is asked to let it go (PCIe
hot-unplug) and must acknowledge within --timeout, or nothing changes (the
disk stays attached and in the spec). The disk's file stays in the VM's
directory unless --delete: virt vm disk add VM --name DISK attaches it
again; virt vm delete removes it with the VM.`,
		Example: `  virt vm disk detach web data
  virt vm disk detach web scratch --delete`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Timeout <= 0 {
				return &UsageError{fmt.Errorf("--timeout %s: must be more than 0", o.Timeout)}
			}
			res, err := env.hotplugs().DetachDisk(cmd.Context(), args[0], args[1], o)
			if err != nil {
				return err
			}
			what := "disk " + res.Device + " detached (file kept)"
			if o.Delete {
				what = "disk " + res.Device + " detached and its file deleted"
			}
			return renderHotplug(env, res, what)
		},
	}
	cmd.Flags().BoolVar(&o.Delete, "delete", false, "also delete the disk's file (its data is lost)")
	durationFlag(cmd.Flags(), &o.Timeout, "timeout", vm.DefaultUnplugTimeout, "how long a running guest has to acknowledge the unplug")
	return cmd
}

func newVMDiskResizeCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resize VM DISK SIZE",
		Short: "Grow a disk to SIZE (online on a running VM; never shrinks)",
		Long: `Grow a disk to SIZE: on a running VM through QEMU (block_resize: the guest sees
the new size at once; growing its partition and file system is the guest's
business), on a stopped one with qemu-img resize. A SIZE smaller than the
disk is refused, naming both sizes: a shrink would cut off the guest's data.`,
		Example:           `  virt vm disk resize web data 40G`,
		Args:              cobra.ExactArgs(3),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := env.hotplugs().ResizeDisk(cmd.Context(), args[0], args[1], args[2])
			if err != nil {
				return err
			}
			return renderHotplug(env, res, fmt.Sprintf("disk %s is %s", res.Device, humanBytes(res.Size)))
		},
	}
	return cmd
}
