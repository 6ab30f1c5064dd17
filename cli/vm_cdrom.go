package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
)

// cdromService is what `virt vm cdrom` asks of the VM manager.
type cdromService interface {
	EjectCDROM(ctx context.Context, ref string) (*vm.CDROMChange, error)
	InsertCDROM(ctx context.Context, ref, iso string) (*vm.CDROMChange, error)
}

var _ cdromService = (*vm.Manager)(nil)

// cdroms is the CD service: the test's fake when it has one, else the
// host's VM manager.
func (e *Env) cdroms() cdromService {
	if c, ok := e.vmSvc.(cdromService); ok {
		return c
	}
	return e.Host().VMs
}

func newVMCDROMCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cdrom",
		Short: "Eject or insert the ISO in a VM's CD drive (spec.cdrom), live on a running VM",
		Long: `Change what is in a VM's CD drive (spec.cdrom.iso). On a running VM the drive
changes at once through QEMU's monitor: the tray is opened even if the guest
locked it (an installer with the CD mounted sees it go), and an insert closes it
again on the new medium. The spec changes too (metadata.generation bumps), so
the next start has the same medium.

A VM without a CD drive: eject is refused; insert on a stopped VM adds a drive
(the VM gets it at its next start), on a running one it is refused (stop it
first: a drive is not hot-plugged).`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "eject VM",
		Short: "Empty the VM's CD drive (the drive stays; the installed disk boots next)",
		Example: `  virt vm cdrom eject inst
  virt vm cdrom eject inst -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			ch, err := env.cdroms().EjectCDROM(cmd.Context(), args[0])
			if err != nil {
				return wordCDROMError(err)
			}
			return renderCDROM(env, ch, "ejected")
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "insert VM FILE.iso",
		Short: "Put an ISO 9660 file in the VM's CD drive (adds a drive to a stopped VM without one)",
		Example: `  virt vm cdrom insert inst debian-12.7.0-amd64-netinst.iso
  virt vm cdrom insert inst /srv/iso/virtio-win.iso`,
		Args: cobra.ExactArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, s string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 1 {
				return []string{"iso"}, cobra.ShellCompDirectiveFilterFileExt
			}
			return vmNames(env)(cmd, args, s)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ch, err := env.cdroms().InsertCDROM(cmd.Context(), args[0], absPath(args[1]))
			if err != nil {
				return wordCDROMError(err)
			}
			return renderCDROM(env, ch, "inserted")
		},
	})
	return cmd
}

func renderCDROM(env *Env, ch *vm.CDROMChange, what string) error {
	return render(env.IO.Out, env.Output, ch, func(w io.Writer) error {
		switch {
		case what == "ejected" && ch.AlreadyEmpty:
			fmt.Fprintf(w, "%s: the CD drive is already empty (nothing changed)\n", ch.Name)
			return nil
		case what == "ejected":
			fmt.Fprintf(w, "%s: ejected %s", ch.Name, dash(ch.Previous))
		default:
			fmt.Fprintf(w, "%s: inserted %s", ch.Name, ch.ISO)
		}
		switch {
		case ch.Live && ch.Forced:
			fmt.Fprint(w, " (live; the guest had locked the tray, it was forced open)")
		case ch.Live:
			fmt.Fprint(w, " (live)")
		case ch.Added:
			fmt.Fprint(w, " (a CD drive was added: the VM has it from its next start)")
		default:
			fmt.Fprint(w, " (the VM is stopped: from its next start)")
		}
		fmt.Fprintln(w)
		return nil
	})
}

// wordCDROMError says what to do about a VM without a CD drive.
func wordCDROMError(err error) error {
	var nd *vm.NoCDROMError
	switch {
	case errors.As(err, &nd) && nd.Running:
		return fmt.Errorf("%w: stop it (virt vm stop %s), then virt vm cdrom insert %s FILE.iso adds one", err, nd.Name, nd.Name)
	case errors.As(err, &nd):
		return fmt.Errorf("%w (virt vm cdrom insert %s FILE.iso adds one while it is stopped)", err, nd.Name)
	}
	return err
}
