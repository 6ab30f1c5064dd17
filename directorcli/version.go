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

func newCompletionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: `Print the completion script for a shell. For example:
  virt-director completion bash > /etc/bash_completion.d/virt-director
  virt-director completion zsh > "${fpath[1]}/_virt-director"
  virt-director completion fish > ~/.config/fish/completions/virt-director.fish`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"bash", "zsh", "fish"},
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return cmd.Root().GenBashCompletionV2(out, true)
			case "zsh":
				return cmd.Root().GenZshCompletion(out)
			case "fish":
				return cmd.Root().GenFishCompletion(out, true)
			}
			return &UsageError{fmt.Errorf("completion: unknown shell %q (want bash, zsh or fish)", args[0])}
		},
	}
}
