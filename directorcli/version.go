package directorcli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/internal/buildinfo"
)

func newVersionCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print virt-director's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			info := buildinfo.Get()
			return render(env.IO.Out, env.Output, info, func(w io.Writer) error {
				fmt.Fprintf(w, "virt-director %s", info.Version)
				if info.Commit != "" {
					fmt.Fprintf(w, " (%s)", info.Commit)
				}
				fmt.Fprintf(w, " %s\n", info.GoVersion)
				return nil
			})
		},
	}
}
