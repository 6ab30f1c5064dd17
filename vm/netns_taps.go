package vm

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/vishvananda/netns"
)

// A stop, kill, delete, save or restore may be run from another network
// namespace than the one the VM's QEMU (and so its TAPs) runs in. Ending
// QEMU works from anywhere, but its TAPs are deleted by name in virt's
// namespace, where they are not: they stayed on their bridge, and a
// later start of the VM made new ones beside them. So the namespace of
// QEMU is held open before QEMU ends (an unnamed one would go with its
// last process, and its TAPs with it) and the TAPs are deleted there.

// holdTAPNetns opens the network namespace of the VM's QEMU pid when it
// is not virt's own and the VM has NICs; nil means virt's own (or one
// that cannot be told: the TAPs are then looked for in virt's, as
// before). The caller closes it.
func (m *Manager) holdTAPNetns(vm *VirtualMachine, pid int) *os.File {
	if pid <= 0 || len(vm.Spec.Network) == 0 {
		return nil
	}
	qemu, err := m.netnsOf(strconv.Itoa(pid))
	if err != nil {
		m.log.Debug("network namespace of QEMU unknown; its TAPs are looked for in ours", "vm", vm.Metadata.Name, "pid", pid, "err", err)
		return nil
	}
	ours, err := m.netnsOf("self")
	if err != nil || ours.ID == qemu.ID {
		return nil
	}
	f, err := os.Open(filepath.Join(m.proc.root, strconv.Itoa(pid), "ns", "net"))
	if err != nil {
		m.log.Warn("network namespace of QEMU not opened; its TAPs may be left there", "vm", vm.Metadata.Name, "pid", pid, "netns", qemu.String(), "err", err)
		return nil
	}
	m.log.Debug("QEMU runs in another network namespace; its TAPs are deleted there", "vm", vm.Metadata.Name, "netns", qemu.String())
	return f
}

// deleteTAPsIn is deleteTAPs in the namespace ns (from holdTAPNetns; nil:
// virt's own), which it closes.
func (m *Manager) deleteTAPsIn(ctx context.Context, vm *VirtualMachine, ns *os.File) {
	if ns == nil {
		m.deleteTAPs(ctx, vm)
		return
	}
	defer ns.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// the thread is never unlocked: it ends with this goroutine, so
		// no other goroutine ever runs in the namespace it entered
		runtime.LockOSThread()
		if err := netns.Set(netns.NsHandle(ns.Fd())); err != nil {
			m.log.Warn("TAPs not deleted: cannot enter the network namespace of the VM's QEMU", "vm", vm.Metadata.Name, "err", err)
			return
		}
		m.deleteTAPs(ctx, vm)
	}()
	<-done
}
