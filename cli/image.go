package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func newImageCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "image",
		Aliases: []string{"images"},
		Short:   "Manage base images (verified downloads; per-VM disks are qcow2 overlays on them)",
	}
	var name, sum string
	pull := &cobra.Command{
		Use:   "pull URL --name NAME",
		Short: "Download an image with a running sha256; a crash mid-download leaves no usable image",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" {
				return &UsageError{errors.New("image pull: --name is required")}
			}
			img, err := env.vms().PullImage(cmd.Context(), args[0], name, sum, env.IO.ErrOut)
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, img, func(w io.Writer) error {
				fmt.Fprintf(w, "%s\t%s\t%s\n", img.Name, img.Format, img.SHA256)
				return nil
			})
		},
	}
	pull.Flags().StringVar(&name, "name", "", "name to store the image under")
	pull.Flags().StringVar(&sum, "sha256", "", "expected sha256; a mismatch discards the download")
	var importName string
	imp := &cobra.Command{
		Use:   "import FILE",
		Short: "Copy a local qcow2 or raw image into the store",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			img, err := env.vms().ImportImage(cmd.Context(), args[0], importName)
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, img, func(w io.Writer) error {
				fmt.Fprintf(w, "%s\t%s\t%s\n", img.Name, img.Format, img.SHA256)
				return nil
			})
		},
	}
	imp.Flags().StringVar(&importName, "name", "", "name (default: the file name without extension)")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List images and the VMs using them",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			imgs, err := env.vms().ListImages()
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, imgs, func(w io.Writer) error {
				fmt.Fprintln(w, "NAME\tFORMAT\tSIZE\tUSED BY\tSHA256")
				for _, i := range imgs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", i.Name, i.Format, gib(uint64(i.SizeBytes)), dash(strings.Join(i.UsedBy, ",")), i.SHA256[:12])
				}
				return nil
			})
		},
	}
	rm := &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"delete"},
		Short:   "Remove an image (refused while a VM's disk uses it)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := env.vms().RemoveImage(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(env.IO.ErrOut, "image %s removed\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(pull, imp, list, rm)
	return cmd
}
