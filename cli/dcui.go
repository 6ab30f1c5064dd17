package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// dcuiBinary finds the dcui program: next to this virt first (an install
// or a build tree keeps them together), then on PATH.
func dcuiBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "dcui")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath("dcui")
	if err != nil {
		return "", errors.New("dcui program not found next to virt or on PATH (install it with `make install`, or build it with `make build`)")
	}
	return p, nil
}

func newDCUICmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dcui [dcui flags]",
		Short: "Open the console UI (the DCUI) in this terminal",
		Long: `Open the DCUI, the interactive console UI, in this terminal. virt replaces
itself with the dcui program (PAM login needs cgo, which the static virt binary
leaves out). Flags after "dcui" go to it: --tier rich|linux|plain, --size WxH,
--pam-service NAME, --admin-group GROUP, --idle-timeout D, --console.
virt's --root is passed on.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if a == "-h" || a == "--help" {
					return cmd.Help()
				}
			}
			bin, err := dcuiBinary()
			if err != nil {
				return err
			}
			argv := []string{bin}
			if env.Root != "" {
				argv = append(argv, "--root", env.Root)
			}
			argv = append(argv, args...)
			if err := syscall.Exec(bin, argv, os.Environ()); err != nil {
				return fmt.Errorf("dcui: exec %s: %w", bin, err)
			}
			return nil
		},
	}
	return cmd
}
