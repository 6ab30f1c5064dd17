package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
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
			img, err := env.vms().PullImage(cmd.Context(), args[0], name, sum, env.pullProgress())
			if err != nil {
				return imageFlags(err)
			}
			env.pulled(img)
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
				return imageFlags(err)
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
		Short:   "List images, their sizes and the VMs using them, and leftovers of interrupted pulls (ORPHANED)",
		Long: `List images, their sizes and the VMs using them. VIRTUAL is the disk size a
guest sees, ALLOCATED the space the file takes on the host. ORPHANED rows are
leftovers of an interrupted pull or import (a partial file, or an image without
its marker): no VM can use them, and virt vm gc removes them. When a VM spec
cannot be read, USED BY says ? (unknown) and the command fails after the list.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			imgs, err := env.vms().ListImages(cmd.Context())
			if imgs == nil {
				return err
			}
			orphans := false
			if rerr := render(env.IO.Out, env.Output, imgs, func(w io.Writer) error {
				fmt.Fprintln(w, "NAME\tCLASS\tFORMAT\tVIRTUAL\tALLOCATED\tUSED BY\tSHA256\tPATH")
				for _, i := range imgs {
					orphans = orphans || i.Class == vm.ClassOrphaned
					virtual, sum, used := "?", "-", "?"
					if i.VirtualSizeBytes != nil {
						virtual = humanBytes(*i.VirtualSizeBytes)
					}
					if len(i.SHA256) >= 12 {
						sum = i.SHA256[:12]
					}
					if i.UsedBy != nil {
						used = dash(strings.Join(i.UsedBy, ","))
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i.Name, i.Class, dash(i.Format), virtual, humanBytes(i.AllocatedBytes), used, sum, i.Path)
				}
				return nil
			}); rerr != nil {
				return rerr
			}
			if orphans && env.Output == FormatTable {
				fmt.Fprintln(env.IO.ErrOut, "note: ORPHANED rows are leftovers of interrupted pulls or imports; virt vm gc removes them")
			}
			return err
		},
	}
	rm := &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"delete"},
		Short:   "Remove an image (refused while a VM's disk uses it, or while any VM spec cannot be read)",
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, tc string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return imageNames(env)(cmd, args, tc)
		},
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

// imageNames completes the names of usable (MANAGED) images, for image rm
// and as vm create's --image completion.
func imageNames(env *Env) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if env.Logger == nil {
			if err := env.setup(cmd); err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
		}
		imgs, _ := env.vms().ListImages(cmd.Context())
		var names []string
		for _, i := range imgs {
			if i.Class == vm.ClassManaged {
				names = append(names, i.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// humanBytes writes a size in binary units, one decimal at most.
func humanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + " " + units[u]
}

// pullProgress words a pull's progress on stderr: a line that updates in
// place on a terminal, nothing otherwise (logs and pipes get the summary).
func (e *Env) pullProgress() vm.ProgressFunc {
	if !e.IO.ErrTTY {
		return nil
	}
	return func(p vm.Progress) {
		switch {
		case p.Total > 0:
			fmt.Fprintf(e.IO.ErrOut, "\rimage %s: %s of %s (%d%%)", p.Image, humanBytes(p.Bytes), humanBytes(p.Total), p.Bytes*100/p.Total)
		default:
			fmt.Fprintf(e.IO.ErrOut, "\rimage %s: %s", p.Image, humanBytes(p.Bytes))
		}
		if p.Done {
			fmt.Fprintln(e.IO.ErrOut)
		}
	}
}

// pulled says on stderr what a pull brought in.
func (e *Env) pulled(img *vm.Image) {
	fmt.Fprintf(e.IO.ErrOut, "image %s: %d bytes, sha256 %s\n", img.Name, img.SizeBytes, img.SHA256)
}
