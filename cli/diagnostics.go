package cli

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/diag"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/buildinfo"
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
				out = fmt.Sprintf("virtcon-diagnostics-%s.tar.gz", time.Now().UTC().Format("20060102T150405Z"))
			}
			ctx := cmd.Context()
			opts := env.hostOptions()
			var inv *hostinfo.Inventory
			collect := func(ctx context.Context) (*hostinfo.Inventory, error) {
				if inv != nil {
					return inv, nil
				}
				var err error
				inv, err = hostinfo.Collect(ctx, opts)
				return inv, err
			}
			parts := []diag.Part{
				{Name: "versions.json", Collect: func(ctx context.Context) (any, error) {
					v := map[string]any{"virt": buildinfo.Get(), "goos": runtime.GOOS, "goarch": runtime.GOARCH, "generated": time.Now().UTC()}
					return v, nil
				}},
				{Name: "inventory.json", Collect: func(ctx context.Context) (any, error) { return collect(ctx) }},
				{Name: "checks.json", Collect: func(ctx context.Context) (any, error) {
					i, err := collect(ctx)
					if err != nil {
						return nil, err
					}
					return hostinfo.RunChecks(ctx, i, hostinfo.CheckOptions{Options: opts}), nil
				}},
			}
			fmt.Fprintf(env.IO.ErrOut, "collecting diagnostics…\n")
			names, err := diag.Write(ctx, env.Logger, out, parts)
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
