package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
)

// displayService is what `virt vm display` asks of the VM manager.
type displayService interface {
	Display(ctx context.Context, ref string) (*vm.DisplayInfo, error)
}

var _ displayService = (*vm.Manager)(nil)

// displays is the display service: the test's fake when it has one, else
// the host's VM manager.
func (e *Env) displays() displayService {
	if d, ok := e.vmSvc.(displayService); ok {
		return d
	}
	return e.Host().VMs
}

// displayView is what `virt vm display -o json` prints: the core's facts
// and the two commands to reach them from another machine.
type displayView struct {
	vm.DisplayInfo `yaml:",inline"`
	SSHTunnel      string `json:"sshTunnel" yaml:"sshTunnel"`
	Viewer         string `json:"viewer" yaml:"viewer"`
}

func newVMDisplayCmd(env *Env) *cobra.Command {
	var (
		target string
		port   int
	)
	cmd := &cobra.Command{
		Use:   "display VM",
		Short: "Show where a VM's screen is served (VNC on a unix socket) and how to reach it over SSH",
		Long: `Show where a VM's screen is served: with spec.display: vnc, QEMU serves it by
VNC on a unix socket under the VM's run dir, never on a TCP port (its VNC server
has no TLS or password configured here, so only root on this host reaches it).
From another machine, forward a local port to the socket over SSH and point a
VNC viewer at it: this prints both commands.

A VM without a display: set spec.display: vnc (virt vm edit, or virt apply) and
restart it; virt vm create --cdrom sets it.`,
		Example: `  virt vm display inst
  virt vm display inst --ssh admin@kvm1.example.net --local-port 5901
  virt vm display inst -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if port < 1 || port > 65535 {
				return &UsageError{fmt.Errorf("--local-port %d: must be between 1 and 65535", port)}
			}
			d, err := env.displays().Display(cmd.Context(), args[0])
			if err != nil {
				return wordDisplayError(err)
			}
			if target == "" {
				host, err := os.Hostname()
				if err != nil || host == "" {
					host = "HOST"
				}
				target = "root@" + host
			}
			view := displayView{DisplayInfo: *d, SSHTunnel: d.SSHTunnel(target, port), Viewer: fmt.Sprintf("vncviewer localhost:%d", port)}
			return render(env.IO.Out, env.Output, view, func(w io.Writer) error {
				fmt.Fprintf(w, "VM:\t%s\nDisplay:\tVNC on the unix socket %s\n", d.Name, d.Socket)
				switch {
				case d.RestartNeeded:
					fmt.Fprintf(w, "Note:\tthe running VM was started before spec.display was vnc: it serves no screen until restarted (virt vm stop %s; virt vm start %s)\n", d.Name, d.Name)
				case !d.Serving:
					fmt.Fprintf(w, "Note:\tthe VM is not running: the socket is there while it runs (virt vm start %s)\n", d.Name)
				}
				fmt.Fprintf(w, "From another machine:\t%s\n", view.SSHTunnel)
				fmt.Fprintf(w, "Then:\t%s\n", view.Viewer)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&target, "ssh", "", "the user@host the ssh line logs in to (default root@ this host's name)")
	cmd.Flags().IntVar(&port, "local-port", 5900, "the port the ssh line forwards on the other machine (5900 is VNC display :0)")
	return cmd
}

// wordDisplayError says how to give a VM a display.
func wordDisplayError(err error) error {
	var nd *vm.NoDisplayError
	if errors.As(err, &nd) {
		return fmt.Errorf("%w: set spec.display: vnc (virt vm edit %s, or virt vm show %s -o yaml, edit, virt apply -f) and restart the VM (virt vm stop %s; virt vm start %s)", err, nd.Name, nd.Name, nd.Name, nd.Name)
	}
	return err
}

// writeCDROMAndDisplay adds the CD drive and the display to virt vm show.
func writeCDROMAndDisplay(w io.Writer, s vm.Spec) {
	if c := s.CDROM; c != nil {
		iso := c.ISO
		if iso == "" {
			iso = "empty"
		}
		fmt.Fprintf(w, "CD drive:\t%s\n", iso)
	}
	if s.Display == vm.DisplayVNC {
		fmt.Fprintf(w, "Display:\tvnc (virt vm display)\n")
	}
}
