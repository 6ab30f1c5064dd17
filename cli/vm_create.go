package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/vm"
)

func newVMCreateCmd(env *Env) *cobra.Command {
	var (
		cpus                                         int
		memory, disk, image, kernel, initrd, cmdline string
		userData, accel, firmware                    string
		cdrom, display                               string
		start, autostart                             bool
		startupOrder                                 int
		startupDelay                                 time.Duration
		labels, networks                             []string
		sshKeys                                      []string
		sshUser                                      string
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a VM from flags (the imperative form of virt apply)",
		Example: `  virt vm create t1 --kernel build/guest/vmlinuz --initrd build/guest/initrd.img --memory 256 --start
  virt vm create web --image debian-12 --disk 20G --cpus 2 --memory 2G --cloud-init-user-data user.yaml --network default --start
  virt vm create web --image debian-12 --ssh-key ~/.ssh/id_ed25519.pub --user ops --network default --start
  virt vm create db --image debian-12 --network bridge=br0 --network default --memory 4G
  virt vm create inst --cdrom debian-12.7.0-amd64-netinst.iso --disk 20G --memory 2G --start   # then: virt vm display inst`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m := env.vms()
			v := &vm.VirtualMachine{APIVersion: vm.APIVersion, Kind: vm.Kind}
			v.Metadata.Name = args[0]
			v.Spec.CPUs, v.Spec.Accel, v.Spec.Firmware, v.Spec.Running = cpus, accel, firmware, start
			v.Spec.Autostart = autostart
			if startupOrder != 0 || startupDelay != 0 {
				// bounds checked by admission, by their spec field
				v.Spec.Startup = &vm.Startup{Order: startupOrder}
				if startupDelay != 0 {
					d := duration.Duration(startupDelay)
					v.Spec.Startup.Delay = &d
				}
			}
			if cpus < 1 {
				// as spec.cpus: 0 in a manifest (vm.Decode): leave it out for the default
				return &UsageError{fmt.Errorf("--cpus %d: must be at least 1", cpus)}
			}
			mib, err := vm.ParseMemoryMiB(memory)
			if err != nil {
				return &UsageError{fmt.Errorf("--memory: %w", err)}
			}
			v.Spec.MemoryMiB = mib
			for _, n := range networks {
				if strings.EqualFold(n, vm.NoNetwork) {
					if len(networks) > 1 {
						return &UsageError{fmt.Errorf("--network %s (user-mode networking) cannot be given with other --network NICs", n)}
					}
					continue // no NIC in the spec: QEMU's user-mode NIC
				}
				nic, err := parseNIC(n)
				if err != nil {
					return &UsageError{fmt.Errorf("--network %q: %w", n, err)}
				}
				v.Spec.Network = append(v.Spec.Network, nic)
			}
			for _, l := range labels {
				k, val, ok := strings.Cut(l, "=")
				if !ok {
					return &UsageError{fmt.Errorf("--label %q: want key=value", l)}
				}
				if v.Metadata.Labels == nil {
					v.Metadata.Labels = map[string]string{}
				}
				v.Metadata.Labels[k] = val
			}
			if image != "" {
				name, pulled, err := m.EnsureImage(cmd.Context(), image, env.pullProgress())
				if err != nil {
					return err
				}
				if pulled != nil {
					env.pulled(pulled)
				}
				v.Spec.Disks = append(v.Spec.Disks, vm.Disk{Name: "root", Image: name, Size: disk})
			} else if disk != "" {
				v.Spec.Disks = append(v.Spec.Disks, vm.Disk{Name: "root", Size: disk})
			}
			if cdrom != "" {
				// the blank disk boots first and falls through to the CD
				// until an installer has filled it (vm cdrom eject after)
				v.Spec.CDROM = &vm.CDROM{ISO: absPath(cdrom)}
				if display == "" {
					display = vm.DisplayVNC // an installer wants a screen
				}
			}
			v.Spec.Display = display
			if kernel != "" || initrd != "" || cmdline != "" {
				v.Spec.Boot = &vm.Boot{Kernel: absPath(kernel), Initrd: absPath(initrd), Cmdline: cmdline}
				if cmdline == "" && kernel != "" {
					v.Spec.Boot.Cmdline = "console=ttyS0"
				}
			}
			if userData != "" {
				b, err := os.ReadFile(userData)
				if err != nil {
					return &UsageError{fmt.Errorf("--cloud-init-user-data: %w", err)}
				}
				v.Spec.CloudInit = &vm.CloudInit{UserData: string(b)}
			}
			if err := addSSHAccess(v, sshKeys, sshUser); err != nil {
				return err
			}
			if start {
				fmt.Fprintf(env.IO.ErrOut, "creating and starting %s…\n", args[0])
			}
			created, err := m.Create(cmd.Context(), v)
			if err != nil {
				return err
			}
			e, err := m.Peek(cmd.Context(), created.Metadata.UID)
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, e, func(w io.Writer) error {
				fmt.Fprintf(w, "virtualmachine/%s created (uid %s)", e.Name, e.UID)
				if e.PID > 0 {
					fmt.Fprintf(w, ", running as pid %d under %s", e.PID, e.Accel)
				}
				fmt.Fprintln(w)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&cpus, "cpus", 1, "virtual CPUs")
	f.StringVar(&memory, "memory", "512", "memory in MiB, or with a unit (2G, 1.5GiB); at least 16 MiB")
	f.StringVar(&disk, "disk", "", "root disk size (10G); grows the image's overlay, or makes a blank disk without --image")
	f.StringVar(&image, "image", "", "base image name (virt image list) or an http(s) URL to pull")
	f.StringVar(&kernel, "kernel", "", "kernel for direct boot")
	f.StringVar(&initrd, "initrd", "", "initramfs for direct boot")
	f.StringVar(&cmdline, "cmdline", "", "kernel command line for direct boot (default console=ttyS0)")
	f.StringVar(&cdrom, "cdrom", "", "an ISO 9660 image (an installer) in a CD drive, booted when the disks are blank; sets --display vnc unless --display none (virt vm cdrom eject once installed)")
	f.StringVar(&display, "display", "", "none, or vnc: a VGA screen served by VNC on a unix socket under the VM's run dir (virt vm display; default vnc with --cdrom, else none)")
	f.StringVar(&userData, "cloud-init-user-data", "", "cloud-init user data file for the NoCloud seed (never logged)")
	f.StringArrayVar(&sshKeys, "ssh-key", nil, "an SSH public key file (id_ed25519.pub) whose keys cloud-init authorises (repeatable; merged into --cloud-init-user-data)")
	f.StringVar(&sshUser, "user", "", "with --ssh-key: the user cloud-init makes for the keys (sudo without a password); default: the image's default user")
	f.StringVar(&accel, "accel", "auto", "accelerator: auto (kvm only when the host probe proved it works), kvm or tcg")
	f.StringVar(&firmware, "firmware", "", "uefi or bios (default uefi; bios with --kernel)")
	f.BoolVar(&start, "start", false, "start the VM once created")
	f.BoolVar(&autostart, "autostart", false, "start the VM when the host boots (virt host boot; docs/host.md)")
	f.IntVar(&startupOrder, "startup-order", 0, fmt.Sprintf("its place in the boot's starts: lower first, then by name (0 to %d)", vm.MaxStartupOrder))
	durationFlag(f, &startupDelay, "startup-delay", 0, "wait this long before starting it at boot (at most 1h)")
	f.StringArrayVar(&labels, "label", nil, "label key=value (repeatable)")
	f.StringArrayVar(&networks, "network", nil, "a NIC on a VM network of network.yaml (NAME) or on a host bridge (bridge=BR), optionally ,mac=M,model=virtio|e1000 (repeatable; none, as without --network: QEMU user-mode networking, outbound only)")
	_ = cmd.RegisterFlagCompletionFunc("image", imageNames(env))
	_ = cmd.RegisterFlagCompletionFunc("network", nicTargets(env))
	_ = cmd.RegisterFlagCompletionFunc("accel", cobra.FixedCompletions([]string{"auto", "kvm", "tcg"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("firmware", cobra.FixedCompletions([]string{"uefi", "bios"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("cdrom", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"iso"}, cobra.ShellCompDirectiveFilterFileExt
	})
	_ = cmd.RegisterFlagCompletionFunc("display", cobra.FixedCompletions([]string{vm.DisplayNone, vm.DisplayVNC}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// nicTargets completes --network: the VM networks of network.yaml by name,
// and bridge=BR for the bridges network.yaml defines and those the host has.
func nicTargets(env *Env) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		if env.Logger == nil {
			if err := env.setup(cmd); err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
		}
		var out []string
		seen := map[string]bool{}
		bridge := func(name string) {
			if !seen[name] {
				seen[name] = true
				out = append(out, "bridge="+name)
			}
		}
		if cfg, err := env.net().LoadEffective(); err == nil && cfg != nil {
			for _, n := range cfg.Networks {
				out = append(out, n.Name)
			}
			for _, b := range cfg.Bridges {
				bridge(b.Name)
			}
		}
		if st, err := env.net().ReadState(cmd.Context()); err == nil {
			for _, l := range st.Links {
				if l.Type == "bridge" {
					bridge(l.Name)
				}
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func absPath(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// parseNIC reads --network: a VM network of network.yaml (NAME or
// network=NAME) or a host bridge (bridge=BR), with optional ,mac= and
// ,model=.
func parseNIC(s string) (vm.NIC, error) {
	var nic vm.NIC
	for i, part := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			if i > 0 {
				return nic, fmt.Errorf("%q: want key=value (network=, bridge=, mac=, model=)", part)
			}
			k, val = "network", part
		}
		switch k {
		case "network":
			nic.Network = val
		case "bridge":
			nic.Bridge = val
		case "mac":
			nic.MAC = val
		case "model":
			nic.Model = val
		default:
			return nic, fmt.Errorf("unknown key %q (want network, bridge, mac or model)", k)
		}
	}
	if (nic.Network == "") == (nic.Bridge == "") {
		return nic, errors.New("give exactly one of a network name or bridge=BR")
	}
	return nic, nil
}
