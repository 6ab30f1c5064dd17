package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/power"
)

func newHostCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Inspect this host (inventory, checks, lifecycle status); bring its network and VMs up at boot, take the guests down; reboot or power it off",
	}
	cmd.AddCommand(newHostInfoCmd(env), newHostCheckCmd(env), newHostBootCmd(env), newHostStatusCmd(env),
		newHostPowerCmd(env, power.ActionReboot), newHostPowerCmd(env, power.ActionPowerOff))
	cmd.AddCommand(newHostShutdownGuestsCmd(env))
	return cmd
}

func newHostInfoCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the hardware inventory: CPU, memory, NUMA, hugepages, PCI, GPUs, NICs, disks, KVM, IOMMU",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			inv, err := env.Host().Info.Inventory(cmd.Context())
			if err != nil {
				return err
			}
			return render(env.IO.Out, env.Output, inv, func(w io.Writer) error { return writeInventory(w, inv) })
		},
	}
}

func newHostCheckCmd(env *Env) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the host's readiness: KVM (with a real probe), IOMMU, hugepages, devices, QEMU, firmware",
		Long: `Run every host check and print PASS/WARN/FAIL/UNKNOWN with a hint for each
problem, then the acceleration verdict (kvm, tcg or none) that VMs with
accel: auto will use. The KVM probe really runs guest code in a child process
with a hard timeout. Exit code 3 when any check FAILs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// a fresh probe, whose verdict the core remembers for this boot
			_, rep, err := env.Host().Info.Check(cmd.Context(), hostinfo.CheckRequest{Fresh: true, ProbeTimeout: timeout})
			if err != nil {
				return err
			}
			if err := render(env.IO.Out, env.Output, rep, func(w io.Writer) error { return env.writeReport(w, rep) }); err != nil {
				return err
			}
			if rep.Failed() {
				return ErrCheckFailed
			}
			return nil
		},
	}
	durationFlag(cmd.Flags(), &timeout, "probe-timeout", 3*time.Second, "hard deadline for the KVM probe")
	return cmd
}

func (e *Env) status(s hostinfo.Status) string {
	word := fmt.Sprintf("%-7s", s)
	switch s {
	case hostinfo.Pass:
		return e.IO.paint("32", word)
	case hostinfo.Warn:
		return e.IO.paint("33", word)
	case hostinfo.Fail:
		return e.IO.paint("1;31", word)
	}
	return e.IO.paint("2", word)
}

func (e *Env) writeReport(w io.Writer, r *hostinfo.Report) error {
	fmt.Fprintln(w, "STATUS\tCHECK\tDETAIL")
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%s\t%s\t%s\n", e.status(c.Status), c.ID, c.Detail)
		if c.Hint != "" && c.Status != hostinfo.Pass {
			fmt.Fprintf(w, "\t\t→ %s\n", c.Hint)
		}
	}
	fmt.Fprintf(w, "\nacceleration: %s (%s)\n", r.Acceleration, r.AccelerationReason)
	return nil
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func optU(p *uint64, f func(uint64) string) string {
	if p == nil {
		return "unknown"
	}
	return f(*p)
}

func optI(p *int) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func writeInventory(w io.Writer, inv *hostinfo.Inventory) error {
	num := func(v uint64) string { return fmt.Sprint(v) }
	fmt.Fprintf(w, "Host:\t%s\n", inv.Hostname)
	fmt.Fprintf(w, "OS:\t%s, kernel %s\n", inv.OS.PrettyName, inv.OS.Kernel)
	fmt.Fprintf(w, "CPU:\t%s (%s), %s sockets, %s cores, %s threads\n", inv.CPU.Model, inv.CPU.Vendor, optI(inv.CPU.Sockets), optI(inv.CPU.Cores), optI(inv.CPU.Threads))
	vf := strings.Join(inv.CPU.VirtFlags, " ")
	if vf == "" {
		vf = "none"
	}
	fmt.Fprintf(w, "Virt flags:\t%s\n", vf)
	if inv.CPU.RunsUnderHypervisor {
		fmt.Fprintf(w, "Runs under:\ta hypervisor (%s): this host is itself a guest\n", cmpOr(inv.CPU.Hypervisor, "not named by sysfs"))
	}
	fmt.Fprintf(w, "Memory:\t%s total, %s available\n", optU(inv.Memory.TotalBytes, gib), optU(inv.Memory.AvailableBytes, gib))
	if inv.NUMA.Nodes == nil {
		fmt.Fprintf(w, "NUMA:\tunknown\n")
	}
	for _, n := range inv.NUMA.Nodes {
		fmt.Fprintf(w, "NUMA node %d:\tcpus %s, %s memory, %s free\n", n.ID, n.CPUs, optU(n.MemTotalBytes, gib), optU(n.MemFreeBytes, gib))
	}
	fmt.Fprintf(w, "THP:\t%s\n", inv.Hugepages.THP)
	for _, p := range inv.Hugepages.Pools {
		fmt.Fprintf(w, "Hugepages %dkB:\ttotal %s, free %s, reserved %s, surplus %s\n", p.SizeKiB, optU(p.Total, num), optU(p.Free, num), optU(p.Reserved, num), optU(p.Surplus, num))
	}
	for _, n := range inv.NUMA.Nodes {
		for _, p := range n.Hugepages {
			fmt.Fprintf(w, "  node %d %dkB:\ttotal %s, free %s, surplus %s\n", n.ID, p.SizeKiB, optU(p.Total, num), optU(p.Free, num), optU(p.Surplus, num))
		}
	}
	for _, m := range inv.Hugepages.Mounts {
		fmt.Fprintf(w, "hugetlbfs:\t%s (%dkB pages)\n", m.Path, m.PageSizeKiB)
	}
	fmt.Fprintf(w, "KVM:\tbackend %s, /dev/kvm present: %t\n", inv.KVM.Backend, inv.KVM.DevicePresent)
	iommu := inv.IOMMU.FirmwareTable
	if iommu == "" {
		iommu = "no DMAR/IVRS table"
	}
	fmt.Fprintf(w, "IOMMU:\t%s, %d groups\n", iommu, len(inv.IOMMU.Groups))

	fmt.Fprintln(w, "\nPCI\tCLASS\tDRIVER\tIOMMU\tDEVICE")
	for _, d := range inv.PCI {
		name := strings.TrimSpace(d.Vendor + " " + d.Product)
		if name == "" {
			name = d.VendorID + ":" + d.DeviceID
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.Address, d.ClassName, dash(d.Driver), optI(d.IOMMUGroup), name)
	}
	if len(inv.GPUs) > 0 {
		fmt.Fprintln(w, "\nGPU\tDRIVER\tIOMMU\tGROUP PEERS\tDEVICE")
		for _, g := range inv.GPUs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s %s\n", g.Address, dash(g.Driver), optI(g.IOMMUGroup), dash(strings.Join(g.GroupPeers, ",")), g.Vendor, g.Product)
		}
	}
	fmt.Fprintln(w, "\nNIC\tMAC\tSTATE\tSPEED\tDRIVER\tVIRTUAL")
	for _, n := range inv.NICs {
		speed := "?"
		if n.SpeedMbps != nil {
			speed = fmt.Sprintf("%dMb/s", *n.SpeedMbps)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%t\n", n.Name, n.MAC, n.State, speed, dash(n.Driver), n.Virtual)
	}
	fmt.Fprintln(w, "\nDISK\tSIZE\tTYPE\tMODEL")
	for _, b := range inv.Block {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", b.Name, gib(b.SizeBytes), b.Type, dash(strings.TrimSpace(b.Vendor+" "+b.Model)))
	}
	if len(inv.Unknowns) > 0 {
		fmt.Fprintln(w, "\nUNKNOWN\tREASON")
		for _, u := range inv.Unknowns {
			fmt.Fprintf(w, "%s\t%s\n", u.Field, u.Reason)
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
