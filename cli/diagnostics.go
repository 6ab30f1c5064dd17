package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/diag"
)

func newDiagnosticsCmd(env *Env) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "diagnostics -o FILE.tar.gz",
		Short: "Write a support bundle: inventory, checks, versions (secrets redacted)",
		Long: `Write a tar.gz support bundle with the host inventory, the host checks and
the versions of virt, QEMU and the kernel. Secrets (passwords, tokens, keys,
cloud-init user data) are redacted. The file is created with mode 0600.
Here -o/--output names the bundle file, not an output format.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				out = diag.FileName(time.Now())
			}
			// The same parts the DCUI's Diagnostics screen writes; the CLI
			// runs the KVM probe afresh, as `virt host check` does.
			fmt.Fprintf(env.IO.ErrOut, "collecting diagnostics…\n")
			names, err := env.Host().Diag.Write(cmd.Context(), out, true)
			if err != nil {
				return err
			}
			st, err := os.Stat(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.IO.ErrOut, "wrote %d files, %d bytes\n", len(names), st.Size())
			fmt.Fprintln(env.IO.Out, out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "bundle file to write (default virtcon-diagnostics-<time>.tar.gz)")
	return cmd
}
