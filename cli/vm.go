package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
	"golang.org/x/term"
)

// vmNames completes VM names.
func vmNames(env *Env) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if env.Logger == nil {
			if err := env.setup(cmd); err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
		}
		entries, _ := env.vms().List(cmd.Context())
		var names []string
		for _, e := range entries {
			if e.Actionable() {
				names = append(names, e.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func newApplyCmd(env *Env) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update a VM from a manifest (apiVersion virtcon/v1, kind VirtualMachine)",
		Long: `Create or update a VM from a YAML or JSON manifest ("-" reads stdin). Unknown
fields are refused; every error names the field and value. A changed spec bumps
metadata.generation; status.observedGeneration follows when the VM next starts.
spec.running: true starts the VM, false stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return &UsageError{errors.New("apply: -f FILE is required")}
			}
			var data []byte
			var err error
			if file == "-" {
				data, err = io.ReadAll(env.IO.In)
			} else {
				data, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("apply: %w", err)
			}
			in, err := vm.Decode(data)
			if err != nil {
				return err
			}
			res, err := env.vms().Apply(cmd.Context(), in)
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, res, func(w io.Writer) error {
				fmt.Fprintf(w, "virtualmachine/%s %s\n", res.VM.Metadata.Name, res.Action)
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "manifest file, or - for stdin")
	return cmd
}

func newVMCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "vm",
		Aliases: []string{"vms"},
		Short:   "Create, run and inspect VMs (plain QEMU processes that outlive virt)",
	}
	cmd.AddCommand(newVMCreateCmd(env), newVMListCmd(env), newVMShowCmd(env), newVMStartCmd(env), newVMStopCmd(env),
		newVMSimpleCmd(env, "kill", "Stop a VM at once (SIGKILL of its QEMU): the guest gets no chance to shut down", func(m vmService, c *cobra.Command, ref string) error { return m.Kill(c.Context(), ref) }),
		newVMSimpleCmd(env, "reboot", "Reset a running VM (hard reset, like the reset button)", func(m vmService, c *cobra.Command, ref string) error { return m.Reboot(c.Context(), ref) }),
		newVMSimpleCmd(env, "pause", "Freeze a running VM's vCPUs", func(m vmService, c *cobra.Command, ref string) error { return m.Pause(c.Context(), ref) }),
		newVMSimpleCmd(env, "resume", "Continue a paused VM", func(m vmService, c *cobra.Command, ref string) error { return m.Resume(c.Context(), ref) }),
		newVMDeleteCmd(env), newVMConsoleCmd(env), newVMLogsCmd(env), newVMIPCmd(env), newVMGCCmd(env))
	cmd.AddCommand(newVMSaveCmd(env))
	cmd.AddCommand(newVMAutostartCmd(env))
	cmd.AddCommand(newVMCDROMCmd(env), newVMDisplayCmd(env))
	cmd.AddCommand(newVMSnapshotCmd(env))
	cmd.AddCommand(newVMCloneCmd(env))
	cmd.AddCommand(newVMStatsCmd(env), newVMEventsCmd(env))
	cmd.AddCommand(newVMEditCmd(env))
	cmd.AddCommand(newVMDiskCmd(env), newVMNICCmd(env))
	return cmd
}

func newVMListCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List VMs: ours with their live phase, our orphans, and external QEMU/libvirt guests",
		Long: `List VMs: ours with their live phase, our orphans, and external QEMU/libvirt
guests. -o wide adds what the host's boot does with each VM: AUTOSTART, its
startup ORDER and DELAY (virt host boot).`,
		Annotations: map[string]string{annotationWide: "true"},
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			entries, err := env.vms().List(cmd.Context())
			if entries == nil {
				if err != nil {
					return err // the store cannot be read: no row could be told apart
				}
				entries = []vm.Entry{}
			}
			wide := env.Output == FormatWide
			if rerr := render(env.IO.Out, env.Output, entries, func(w io.Writer) error {
				head := "NAME\tCLASS\tPHASE\tACCEL\tPID\tCPUS\tMEMORY\t"
				if wide {
					head += "AUTOSTART\tORDER\tDELAY\t"
				}
				fmt.Fprintln(w, head+"UID")
				for _, e := range entries {
					uid := e.UID
					if uid == "" {
						uid = e.Path // an orphaned file or TAP
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t", dash(e.Name), e.Class, e.Phase, dash(e.Accel), count(e.PID), count(e.CPUs), mib(e.MemoryMiB))
					if wide {
						fmt.Fprintf(w, "%s\t", autostartCells(e))
					}
					fmt.Fprintf(w, "%s\n", dash(uid))
				}
				return nil
			}); rerr != nil {
				return rerr
			}
			// the listing is printed, rows with problems included; the
			// exit status says it is not whole
			return err
		},
	}
}

func newVMShowCmd(env *Env) *cobra.Command {
	var secrets bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a VM's manifest and live status (cloud-init user data redacted unless --show-secrets)",
		Long: `Show a VM's manifest with its live status. Cloud-init user data is shown as
[REDACTED] unless --show-secrets; applying a manifest whose user data is
[REDACTED] keeps the stored user data, so show -o yaml | apply -f - round-trips.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			m := env.vms()
			v, e, err := m.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if v == nil { // EXTERNAL, or a live ORPHANED QEMU: what is known, read-only
				return render(env.IO.Out, env.Output, e, func(w io.Writer) error {
					fmt.Fprintf(w, "Name:\t%s\nUID:\t%s\nClass:\t%s\nPhase:\t%s\n", dash(e.Name), dash(e.UID), e.Class, e.Phase)
					if e.Source != "" {
						fmt.Fprintf(w, "Source:\t%s\n", e.Source)
					}
					if e.PID > 0 {
						fmt.Fprintf(w, "PID:\t%d\n", e.PID)
					}
					fmt.Fprintf(w, "Accel:\t%s\nCPUs:\t%s\nMemory:\t%s\n", dash(e.Accel), count(e.CPUs), mib(e.MemoryMiB))
					fmt.Fprintf(w, "Note:\t%s\n", e.Message)
					return nil
				})
			}
			if !secrets {
				v = vm.Redacted(v)
			}
			nics := m.NICs(cmd.Context(), v)
			return render(env.IO.Out, env.Output, v, func(w io.Writer) error {
				fmt.Fprintf(w, "Name:\t%s\nUID:\t%s\nClass:\t%s\nPhase:\t%s\n", e.Name, e.UID, e.Class, e.Phase)
				if e.PID > 0 {
					fmt.Fprintf(w, "PID:\t%d\n", e.PID)
				}
				fmt.Fprintf(w, "Accel:\t%s\n", dash(e.Accel))
				if v.Status.AccelReason != "" {
					fmt.Fprintf(w, "Accel reason:\t%s\n", v.Status.AccelReason)
				}
				writeCgroup(w, v.Status.Cgroup)
				fmt.Fprintf(w, "CPUs:\t%d\nMemory:\t%d MiB\nFirmware:\t%s\n", v.Spec.CPUs, v.Spec.MemoryMiB, v.Spec.Firmware)
				fmt.Fprintf(w, "Generation:\t%d (observed %d)\n", v.Metadata.Generation, v.Status.ObservedGeneration)
				fmt.Fprintf(w, "Autostart:\t%s\n", autostartLine(v.Spec))
				for _, d := range v.Spec.Disks {
					fmt.Fprintf(w, "Disk %s:\timage %s, size %s\n", d.Name, dash(d.Image), dash(d.Size))
				}
				writeCDROMAndDisplay(w, v.Spec)
				if len(nics) == 0 {
					fmt.Fprintf(w, "NIC:\tuser-mode networking (outbound only; not reachable from the host)\n")
				}
				for _, n := range nics {
					on := "bridge " + n.Bridge
					if n.Network != "" {
						on = "network " + n.Network + " (bridge " + dash(n.Bridge) + ")"
					}
					fmt.Fprintf(w, "NIC %d:\t%s, mac %s, %s, tap %s\n", n.Index, on, n.MAC, n.Model, n.TAP)
				}
				if b := v.Spec.Boot; b != nil {
					fmt.Fprintf(w, "Kernel:\t%s\nInitrd:\t%s\nCmdline:\t%s\n", b.Kernel, dash(b.Initrd), b.Cmdline)
				}
				if v.Spec.CloudInit != nil && v.Spec.CloudInit.UserData != "" {
					fmt.Fprintf(w, "Cloud-init:\tuser data set (not shown)\n")
				}
				if e.Message != "" {
					fmt.Fprintf(w, "Note:\t%s%s\n", e.Message, reasonHint(e.Reason))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&secrets, "show-secrets", false, "print cloud-init user data as stored")
	return cmd
}

func newVMConsoleCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "console NAME",
		Short: "Attach to a VM's serial console; Ctrl-] detaches and never stops the VM",
		Long: `Attach to a VM's serial console. Ctrl-] detaches; the VM keeps running.
One client at a time: while another holds the console, this fails with
"console busy" naming the holder when it is a virtcon process.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := env.IO.In
			var restore func()
			defer func() {
				if restore != nil {
					restore()
				}
			}()
			var name string
			err := env.vms().Console(cmd.Context(), args[0], in, env.IO.Out, func(v *vm.VirtualMachine) {
				name = v.Metadata.Name // called by UUID (the DCUI does): say which VM
				if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					if old, err := term.MakeRaw(int(f.Fd())); err == nil {
						restore = func() { term.Restore(int(f.Fd()), old) }
					}
				}
				fmt.Fprintf(env.IO.ErrOut, "Connected to %s's serial console. Detach with Ctrl-]\r\n", name)
			})
			if name == "" {
				return err // nothing was attached: only the error
			}
			fmt.Fprintf(env.IO.ErrOut, "\r\nDetached from %s (the VM keeps running).\r\n", name)
			return err
		},
	}
}

func newVMLogsCmd(env *Env) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:               "logs NAME",
		Short:             "Print a VM's serial console log",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.vms().Logs(cmd.Context(), args[0], env.IO.Out, follow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output")
	return cmd
}

func newVMIPCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:               "ip NAME",
		Short:             "Show a VM's IP addresses (from the guest agent)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			addrs, err := env.vms().IP(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, addrs, func(w io.Writer) error {
				fmt.Fprintln(w, "INTERFACE\tADDRESS\tSOURCE")
				for _, a := range addrs {
					fmt.Fprintf(w, "%s\t%s\t%s\n", a.Interface, a.Address, a.Source)
				}
				return nil
			})
		},
	}
}

func newVMGCCmd(env *Env) *cobra.Command {
	var dry bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove virtcon's orphaned files (volumes, runtime dirs, logs, partial downloads without a VM) and cancel what interrupted clones left in running QEMUs; never kills processes, never removes a file a QEMU holds open",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			items, err := env.vms().GC(cmd.Context(), dry)
			if rerr := render(env.IO.Out, env.Output, items, func(w io.Writer) error {
				if len(items) == 0 {
					fmt.Fprintln(w, "nothing to collect")
				}
				for _, o := range items {
					verb := map[[2]bool]string{{false, false}: "removed", {true, false}: "would remove",
						{false, true}: "cancelled", {true, true}: "would cancel"}[[2]bool{dry, o.InQEMU()}]
					if o.Fix != "" {
						fix := map[bool]string{false: "fixed", true: "would fix"}[dry]
						fmt.Fprintf(w, "%s\t%s\t(%s: %s)\n", fix, o.Path, o.What, o.Fix)
						continue
					}
					if o.Kept != "" {
						fmt.Fprintf(w, "kept\t%s\t(%s: %s)\n", o.Path, o.What, o.Kept)
						continue
					}
					fmt.Fprintf(w, "%s\t%s\t(%s)\n", verb, o.Path, o.What)
				}
				return nil
			}); rerr != nil {
				return rerr
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&dry, "dry-run", false, "only list what would be removed")
	return cmd
}

// autostartCells are the wide list's AUTOSTART, ORDER and DELAY cells:
// "-" for the guests that are not ours (the boot never starts them).
func autostartCells(e vm.Entry) string {
	if !e.Actionable() && e.Class != vm.ClassUnreadable {
		return "-\t-\t-"
	}
	if e.Class == vm.ClassUnreadable {
		return "?\t?\t?" // the spec says, and it cannot be read
	}
	return fmt.Sprintf("%s\t%d\t%s", yesNo(e.Autostart), e.StartupOrder, e.StartupDelay)
}

// autostartLine is `vm show`'s Autostart line.
func autostartLine(s vm.Spec) string {
	what := "no (virt host boot leaves it stopped"
	if s.Autostart {
		what = "yes (virt host boot starts it"
	}
	return fmt.Sprintf("%s; startup order %d, delay %s)", what, s.StartupOrder(), s.StartupDelay())
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
