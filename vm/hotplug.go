package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/virtcon/virtcon/internal/revert"
)

// Disks and NICs of a VM, running or not (virt vm disk / virt vm nic).
//
// A stopped VM: only the spec changes (and the disk file, for an add or a
// resize); the change is realised at the next start. A running VM: the
// change is hot-plugged through QMP first, and the spec follows with a
// generation bump and observedGeneration kept in step (when it was: an
// unrealised earlier change stays unrealised). A paused or unresponsive
// VM is refused (HotplugStateError): nothing is changed. A hot-plug that
// fails half way undoes what it did (revert stack).
//
// Hot-plugged devices go on a free PCIe root port (freePort); at the next
// start every device is cold-plugged on a port of its own again.

// DefaultUnplugTimeout bounds the wait for the guest's acknowledgement of
// a detach (DEVICE_DELETED). Linux's pciehp waits 5 s after the attention
// button before it lets a device go.
const DefaultUnplugTimeout = 30 * time.Second

// DiskAddOptions is a disk to add: a blank one of Size, or an overlay of
// base Image (grown to Size when given). Name defaults to diskN.
type DiskAddOptions struct {
	Name, Size, Image string
}

// DiskDetachOptions tune DetachDisk.
type DiskDetachOptions struct {
	// Delete also removes the disk file; without it the file stays in
	// the VM's directory (a disk add with the same name and no size or
	// image attaches it again) until the VM is deleted.
	Delete bool
	// Timeout bounds the wait for the guest (0: DefaultUnplugTimeout).
	Timeout time.Duration
}

// NICAddOptions is a NIC to add: on a VM network or a host bridge.
type NICAddOptions struct {
	Network, Bridge string
	MAC             string // "" generates one
	Model           string // virtio (default) or e1000
}

// NICDetachOptions tune DetachNIC.
type NICDetachOptions struct {
	Timeout time.Duration // 0: DefaultUnplugTimeout
}

// HotplugResult says what a disk or NIC change did.
type HotplugResult struct {
	VM     string `json:"vm"`
	Device string `json:"device"` // the disk's name or the NIC's MAC
	// Live: the running VM took it now; else only the spec changed.
	Live       bool          `json:"live"`
	Generation int64         `json:"generation"`
	Took       time.Duration `json:"took"`
	// Size is a resized disk's new size in bytes.
	Size int64 `json:"size,omitempty"`
}

// hotplugVM takes the VM's lock and, when it runs, a QMP session on it;
// a VM in no state for a hot-plug is refused. done releases both.
func (m *Manager) hotplugVM(ctx context.Context, ref, op string) (vm *VirtualMachine, s *hotSession, pid int, done func(), err error) {
	vm, l, err := m.lockedVM(ctx, ref)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	if pid = m.livePID(vm.Metadata.UID); pid > 0 {
		if s, err = m.openHotplug(ctx, vm, pid, op); err != nil {
			l.Release()
			return nil, nil, 0, nil, err
		}
	}
	return vm, s, pid, func() {
		if s != nil {
			s.close()
		}
		l.Release()
	}, nil
}

// commitSpec stores vm with its generation bumped; live: the running
// QEMU realised the change, so observedGeneration follows if it was in
// step.
func (m *Manager) commitSpec(vm *VirtualMachine, live bool) error {
	inStep := vm.Status.ObservedGeneration == vm.Metadata.Generation
	vm.Metadata.Generation++
	if live && inStep {
		vm.Status.ObservedGeneration = vm.Metadata.Generation
	}
	return m.store.save(vm)
}

// validateDiskAdd checks a disk to add to spec (with defaults applied)
// and returns it; exists says whether its file is there already (a disk
// detached with its file kept).
func validateDiskAdd(spec *Spec, o DiskAddOptions, fileExists func(name string) bool) (Disk, error) {
	i := len(spec.Disks)
	f := fmt.Sprintf("spec.disks[%d]", i)
	d := Disk{Name: o.Name, Size: strings.TrimSpace(o.Size), Image: o.Image}
	if d.Name == "" {
		for n := i; ; n++ {
			cand := "disk" + strconv.Itoa(n)
			if !slices.ContainsFunc(spec.Disks, func(x Disk) bool { return strings.EqualFold(x.Name, cand) }) && !fileExists(cand) {
				d.Name = cand
				break
			}
		}
	}
	var errs []*FieldError
	add := func(fe *FieldError) {
		if fe != nil {
			errs = append(errs, fe)
		}
	}
	add(ValidateName(f+".name", d.Name))
	if slices.ContainsFunc(spec.Disks, func(x Disk) bool { return strings.EqualFold(x.Name, d.Name) }) {
		add(fieldErr(f+".name", d.Name, "the VM has a disk by this name"))
	}
	if d.Image != "" {
		add(ValidateName(f+".image", d.Image))
	}
	if d.Size != "" {
		if n, err := ParseSize(d.Size); err != nil || n < 1<<20 {
			add(fieldErr(f+".size", d.Size, "must be a size like 512M, 10G or 1T (at least 1M)"))
		}
	}
	if len(errs) == 0 && d.Name != "" && fileExists(d.Name) && (d.Size != "" || d.Image != "") {
		add(fieldErr(f+".name", d.Name, "a disk file by this name is kept from an earlier detach: give no size or image to attach it again, or another name"))
	}
	if len(errs) == 0 && d.Size == "" && d.Image == "" && !fileExists(d.Name) {
		add(fieldErr(f, d.Name, "needs a size or an image (or the name of a disk detached with its file kept)"))
	}
	if len(errs) > 0 {
		return d, invalid(errs...)
	}
	return d, nil
}

// AddDisk adds a disk to the VM: hot-plugged when it runs.
func (m *Manager) AddDisk(ctx context.Context, ref string, o DiskAddOptions) (*HotplugResult, error) {
	start := time.Now()
	vm, s, pid, done, err := m.hotplugVM(ctx, ref, "disk add")
	if err != nil {
		return nil, err
	}
	defer done()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	d, err := validateDiskAdd(&vm.Spec, o, func(n string) bool { _, err := os.Stat(m.diskPath(uid, n)); return err == nil })
	if err != nil {
		return nil, err
	}
	path := m.diskPath(uid, d.Name)
	r := revert.New()
	defer r.Fail()
	if _, err := os.Stat(path); err != nil {
		if err := m.createDisks(ctx, vm, []Disk{d}); err != nil {
			return nil, fmt.Errorf("vm %q: disk add: %w", name, err)
		}
		r.Add(func() error { return os.Remove(path) })
	} else if d.Size == "" && d.Image == "" {
		// a kept file attached again: the spec needs its size, and QEMU
		// opens every disk as qcow2 (a file put there by hand may be raw)
		info, err := m.diskFileInfo(ctx, path, false)
		if err != nil {
			return nil, fmt.Errorf("vm %q: disk add: %w", name, err)
		}
		if info.Format != "qcow2" {
			return nil, invalid(fieldErr(fmt.Sprintf("spec.disks[%d].name", len(vm.Spec.Disks)), d.Name,
				fmt.Sprintf("the file %s is %s, not qcow2: a VM's disks are qcow2 (qemu-img convert -O qcow2 it, or give another name)", path, info.Format)))
		}
		d.Size = strconv.FormatInt(info.VirtualSize, 10)
	}
	if s != nil {
		if err := m.recordHotplug(uid, pid, "disk "+d.Name+" added"); err != nil {
			return nil, fmt.Errorf("vm %q: disk add: %w", name, err)
		}
		if err := s.plugDisk(ctx, r, d.Name, path); err != nil {
			return nil, fmt.Errorf("vm %q: disk add %s: %w", name, d.Name, err)
		}
	}
	vm.Spec.Disks = append(vm.Spec.Disks, d)
	if err := m.commitSpec(vm, s != nil); err != nil {
		return nil, fmt.Errorf("vm %q: disk add: %w", name, err)
	}
	r.Success()
	res := &HotplugResult{VM: name, Device: d.Name, Live: s != nil, Generation: vm.Metadata.Generation, Took: time.Since(start)}
	m.log.Info("disk added", "vm", name, "disk", d.Name, "live", res.Live, "took", res.Took)
	return res, nil
}

// plugDisk opens the disk file as a block node and plugs a virtio-blk on
// a free root port; r undoes each step.
func (s *hotSession) plugDisk(ctx context.Context, r *revert.Stack, disk, path string) error {
	port, err := s.port(ctx)
	if err != nil {
		return err
	}
	node := DiskDriveID(disk)
	if err := s.do(ctx, "blockdev-add", map[string]any{
		"driver": "qcow2", "node-name": node, "discard": "unmap",
		"file": map[string]any{"driver": "file", "filename": path},
	}, nil); err != nil {
		return fmt.Errorf("blockdev-add: %w", err)
	}
	r.Add(func() error {
		return s.do(context.WithoutCancel(ctx), "blockdev-del", map[string]any{"node-name": node}, nil)
	})
	dev := DiskDeviceID(disk)
	if err := s.do(ctx, "device_add", map[string]any{
		"driver": "virtio-blk-pci", "drive": node, "id": dev, "bus": port, "serial": disk,
	}, nil); err != nil {
		return fmt.Errorf("device_add on %s: %w", port, err)
	}
	r.Add(func() error {
		// the guest may hold it already: ask, without waiting
		return s.do(context.WithoutCancel(ctx), "device_del", map[string]any{"id": dev}, nil)
	})
	return nil
}

// findDisk is the index of the named disk in spec.disks.
func findDisk(spec *Spec, disk string) (int, error) {
	i := slices.IndexFunc(spec.Disks, func(d Disk) bool { return strings.EqualFold(d.Name, disk) })
	if i < 0 {
		var names []string
		for _, d := range spec.Disks {
			names = append(names, d.Name)
		}
		return -1, invalid(fieldErr("disk", disk, fmt.Sprintf("the VM has no such disk (it has: %s)", listOrNone(names))))
	}
	return i, nil
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// DetachDisk removes a disk from the VM (unplugged first when it runs).
// Its file is kept unless o.Delete.
func (m *Manager) DetachDisk(ctx context.Context, ref, disk string, o DiskDetachOptions) (*HotplugResult, error) {
	start := time.Now()
	vm, s, pid, done, err := m.hotplugVM(ctx, ref, "disk detach")
	if err != nil {
		return nil, err
	}
	defer done()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	i, err := findDisk(&vm.Spec, disk)
	if err != nil {
		return nil, err
	}
	d := vm.Spec.Disks[i]
	if o.Delete {
		// deleting the file deletes the snapshots inside it: refused, as
		// vm delete refuses a VM with snapshots without WithSnapshots
		tags, err := m.diskSnapshotTags(ctx, m.diskPath(uid, d.Name))
		if err != nil {
			return nil, fmt.Errorf("vm %q: disk detach %s --delete: the disk's snapshots cannot be read: %w", name, d.Name, err)
		}
		if len(tags) > 0 {
			return nil, fmt.Errorf("vm %q: disk detach %s --delete: the disk holds snapshots %s (delete them first with virt vm snapshot delete, or detach without --delete to keep the file with them): %w",
				name, d.Name, strings.Join(tags, ", "), ErrHasSnapshots)
		}
	}
	if s != nil {
		if err := m.recordHotplug(uid, pid, "disk "+d.Name+" detached"); err != nil {
			return nil, fmt.Errorf("vm %q: disk detach: %w", name, err)
		}
		if err := s.unplug(ctx, DiskDeviceID(d.Name), timeoutOr(o.Timeout)); err != nil {
			return nil, fmt.Errorf("vm %q: disk detach %s: %w", name, d.Name, err)
		}
		if err := s.dropBlock(ctx, d.Name); err != nil {
			// the guest has let the disk go: detached it is, but QEMU may
			// hold the file open until it ends
			m.log.Warn("block backend not deleted", "vm", name, "disk", d.Name, "err", err)
		}
	}
	vm.Spec.Disks = slices.Delete(slices.Clone(vm.Spec.Disks), i, i+1)
	if err := m.commitSpec(vm, s != nil); err != nil {
		return nil, fmt.Errorf("vm %q: disk detach: %w", name, err)
	}
	if o.Delete {
		if err := os.Remove(m.diskPath(uid, d.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("vm %q: disk detach %s: detached, but the file was not deleted: %w", name, d.Name, err)
		}
	}
	res := &HotplugResult{VM: name, Device: d.Name, Live: s != nil, Generation: vm.Metadata.Generation, Took: time.Since(start)}
	m.log.Info("disk detached", "vm", name, "disk", d.Name, "live", res.Live, "deleted", o.Delete, "took", res.Took)
	return res, nil
}

func timeoutOr(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultUnplugTimeout
	}
	return d
}

// resizeTimeout bounds a live block_resize when the caller's ctx has no
// deadline: QEMU drains the disk's I/O before it answers.
const resizeTimeout = 2 * time.Minute

// ResizeDisk grows a disk to size: online through QMP block_resize when
// the VM runs, with qemu-img when it is stopped. A shrink is refused.
func (m *Manager) ResizeDisk(ctx context.Context, ref, disk, size string) (*HotplugResult, error) {
	start := time.Now()
	want, err := ParseSize(size)
	if err != nil {
		return nil, invalid(fieldErr("size", size, err.Error()))
	}
	vm, s, _, done, err := m.hotplugVM(ctx, ref, "disk resize")
	if err != nil {
		return nil, err
	}
	defer done()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	i, err := findDisk(&vm.Spec, disk)
	if err != nil {
		return nil, err
	}
	d := vm.Spec.Disks[i]
	path := m.diskPath(uid, d.Name)
	var cur int64
	var blk blockInfo
	if s != nil {
		if blk, err = s.block(ctx, d.Name); err != nil {
			return nil, fmt.Errorf("vm %q: disk resize %s: %w", name, d.Name, err)
		}
		cur = blk.Inserted.Image.VirtualSize
	} else if cur, err = m.diskFileSize(ctx, path, false); err != nil {
		return nil, fmt.Errorf("vm %q: disk resize %s: %w", name, d.Name, err)
	}
	if err := checkGrow(d.Name, cur, want, size); err != nil {
		return nil, err
	}
	res := &HotplugResult{VM: name, Device: d.Name, Live: s != nil, Generation: vm.Metadata.Generation, Size: want}
	if want == cur {
		res.Took = time.Since(start)
		return res, nil // nothing to do
	}
	if s != nil {
		args := map[string]any{"size": want}
		if blk.Device != "" {
			args["device"] = blk.Device
		} else {
			args["node-name"] = blk.Inserted.NodeName
		}
		// block_resize drains the disk first: a busy one answers late
		rctx, cancel := opDeadline(ctx, resizeTimeout)
		err := m.execLong(rctx, s.mon, nil, "block_resize", args, nil)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("vm %q: disk resize %s: block_resize: %w", name, d.Name, err)
		}
	} else {
		img, err := m.qemuImg()
		if err != nil {
			return nil, err
		}
		if err := runTool(ctx, img, "resize", "-q", "-f", "qcow2", path, strconv.FormatInt(want, 10)); err != nil {
			return nil, fmt.Errorf("vm %q: disk resize %s: %w", name, d.Name, err)
		}
	}
	vm.Spec.Disks = slices.Clone(vm.Spec.Disks)
	vm.Spec.Disks[i].Size = sizeSpec(want)
	if err := m.commitSpec(vm, s != nil); err != nil {
		return nil, fmt.Errorf("vm %q: disk resize %s: resized, but the spec was not stored: %w", name, d.Name, err)
	}
	res.Generation, res.Took = vm.Metadata.Generation, time.Since(start)
	m.log.Info("disk resized", "vm", name, "disk", d.Name, "from", cur, "to", want, "live", res.Live)
	return res, nil
}

// checkGrow refuses a shrink, naming both sizes.
func checkGrow(disk string, cur, want int64, given string) error {
	if want < cur {
		return invalid(fieldErr("size", given, fmt.Sprintf("is %s, smaller than disk %q's current %s: disks only grow (a shrink would cut off the guest's data)", sizeString(want), disk, sizeString(cur))))
	}
	return nil
}

// sizeSpec writes bytes as spec.disks[].size: a whole unit when it is
// one (10G), else bytes.
func sizeSpec(n int64) string {
	for _, u := range []struct {
		unit  string
		shift uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.unit
		}
	}
	return strconv.FormatInt(n, 10)
}

// diskFileSize is a disk file's virtual size (qemu-img info; shared:
// -U, for a file a running QEMU holds).
func (m *Manager) diskFileSize(ctx context.Context, path string, shared bool) (int64, error) {
	info, err := m.diskFileInfo(ctx, path, shared)
	return info.VirtualSize, err
}

// diskFileInfo is qemu-img info of a disk file (shared: -U). Its format
// is probed: a raw file is not read as qcow2 or the other way round.
func (m *Manager) diskFileInfo(ctx context.Context, path string, shared bool) (imgInfo, error) {
	var info imgInfo
	img, err := m.qemuImg()
	if err != nil {
		return info, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	args := []string{"info", "--output=json"}
	if shared {
		args = append(args, "-U")
	}
	var stdout, stderr bytes.Buffer
	cmd := childCommand(ctx, img, append(args, path)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := runChild(cmd); err != nil {
		return info, fmt.Errorf("qemu-img info %s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return info, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	return info, nil
}

// validateNICAdd checks a NIC to add and returns it with its MAC (given,
// or generated and unique on the VM) and model.
func validateNICAdd(uid string, spec *Spec, o NICAddOptions) (NIC, error) {
	i := len(spec.Network)
	f := fmt.Sprintf("spec.network[%d]", i)
	n := NIC{Network: o.Network, Bridge: o.Bridge, MAC: strings.ToLower(strings.TrimSpace(o.MAC)), Model: o.Model}
	if n.Model == "" {
		n.Model = "virtio"
	}
	var errs []*FieldError
	add := func(fe *FieldError) {
		if fe != nil {
			errs = append(errs, fe)
		}
	}
	switch {
	case (n.Bridge == "") == (n.Network == ""):
		add(fieldErr(f, n.Bridge+n.Network, "give exactly one of a network or a bridge"))
	case n.Bridge != "" && !ifNameRE.MatchString(n.Bridge):
		add(fieldErr(f+".bridge", n.Bridge, "must be an interface name (1-15 letters, digits, '.', '-', '_')"))
	case isNoNetwork(n.Network):
		add(fieldErr(f+".network", n.Network, noNetworkMsg))
	case n.Network != "":
		add(ValidateName(f+".network", n.Network))
	}
	if n.Model != "virtio" && n.Model != "e1000" {
		add(fieldErr(f+".model", n.Model, "must be virtio or e1000"))
	}
	used := func(mac string) bool {
		if len(spec.Network) == 0 && strings.EqualFold(mac, MACFor(uid, 0)) {
			return true // the user-mode NIC a VM without NICs runs with
		}
		return slices.ContainsFunc(pinMACs(uid, spec.Network), func(x NIC) bool { return strings.EqualFold(x.MAC, mac) })
	}
	if n.MAC != "" {
		hw, err := net.ParseMAC(n.MAC)
		switch {
		case err != nil || len(hw) != 6 || hw[0]&1 == 1:
			add(fieldErr(f+".mac", o.MAC, "must be a unicast Ethernet address like 52:54:00:12:34:56"))
		case used(hw.String()):
			add(fieldErr(f+".mac", o.MAC, "another NIC of the VM has this MAC"))
		default:
			n.MAC = hw.String()
		}
	} else {
		for k := i; n.MAC == ""; k++ {
			if mac := MACFor(uid, k); !used(mac) {
				n.MAC = mac
			}
		}
	}
	if len(errs) > 0 {
		return n, invalid(errs...)
	}
	return n, nil
}

// AddNIC adds a NIC to the VM: on a running VM its TAP is made and the
// NIC hot-plugged. The NIC gets an explicit MAC in the spec.
func (m *Manager) AddNIC(ctx context.Context, ref string, o NICAddOptions) (*HotplugResult, error) {
	start := time.Now()
	vm, s, pid, done, err := m.hotplugVM(ctx, ref, "nic add")
	if err != nil {
		return nil, err
	}
	defer done()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	n, err := validateNICAdd(uid, &vm.Spec, o)
	if err != nil {
		return nil, err
	}
	index := len(vm.Spec.Network)
	bridge := n.Bridge
	if n.Network != "" {
		if bridge, err = m.opts.Net.BridgeFor(n.Network); err != nil {
			return nil, fmt.Errorf("vm %q: nic add: spec.network[%d].network %q: %w", name, index, n.Network, err)
		}
	}
	r := revert.New()
	defer r.Fail()
	if s != nil {
		// its TAP goes where QEMU is, and is made where virt is
		if err := m.checkNetns(name, "nic add", pid); err != nil {
			return nil, err
		}
		if err := m.recordHotplug(uid, pid, "nic "+n.MAC+" added"); err != nil {
			return nil, fmt.Errorf("vm %q: nic add: %w", name, err)
		}
		// NIC i's TAP is TAPName(uid, i) everywhere (start, stop, show,
		// stats), kept so by a detach, which renames the TAPs after it:
		// this index's TAP is free
		tap := m.opts.Net.TAPName(uid, index)
		if err := m.opts.Net.CreateTAP(ctx, tap, bridge, 0); err != nil {
			return nil, fmt.Errorf("vm %q: nic add: TAP %s on %s: %w", name, tap, bridge, err)
		}
		r.Add(func() error { return m.opts.Net.DeleteTAP(context.WithoutCancel(ctx), tap) })
		if err := s.plugNIC(ctx, r, n, tap); err != nil {
			return nil, fmt.Errorf("vm %q: nic add %s: %w", name, n.MAC, err)
		}
	}
	vm.Spec.Network = append(pinMACs(uid, vm.Spec.Network), n)
	if err := m.commitSpec(vm, s != nil); err != nil {
		return nil, fmt.Errorf("vm %q: nic add: %w", name, err)
	}
	r.Success()
	res := &HotplugResult{VM: name, Device: n.MAC, Live: s != nil, Generation: vm.Metadata.Generation, Took: time.Since(start)}
	m.log.Info("nic added", "vm", name, "mac", n.MAC, "bridge", bridge, "live", res.Live, "took", res.Took)
	return res, nil
}

// plugNIC adds the TAP netdev and the NIC on a free root port.
func (s *hotSession) plugNIC(ctx context.Context, r *revert.Stack, n NIC, tap string) error {
	port, err := s.port(ctx)
	if err != nil {
		return err
	}
	netdev, dev := NICNetdevID(n.MAC), NICDeviceID(n.MAC)
	if err := s.do(ctx, "netdev_add", map[string]any{
		"type": "tap", "id": netdev, "ifname": tap, "script": "no", "downscript": "no",
	}, nil); err != nil {
		return fmt.Errorf("netdev_add: %w", err)
	}
	r.Add(func() error { return s.do(context.WithoutCancel(ctx), "netdev_del", map[string]any{"id": netdev}, nil) })
	driver := "virtio-net-pci"
	if n.Model == "e1000" {
		driver = "e1000"
	}
	if err := s.do(ctx, "device_add", map[string]any{
		"driver": driver, "netdev": netdev, "id": dev, "bus": port, "mac": n.MAC, "romfile": "",
	}, nil); err != nil {
		return fmt.Errorf("device_add on %s: %w", port, err)
	}
	r.Add(func() error { return s.do(context.WithoutCancel(ctx), "device_del", map[string]any{"id": dev}, nil) })
	return nil
}

// pinMACs writes every NIC's current MAC into a copy of nics: a NIC
// without one takes its index's default, which shifts once a NIC before
// it goes.
func pinMACs(uid string, nics []NIC) []NIC {
	out := slices.Clone(nics)
	for i := range out {
		if out[i].MAC == "" {
			out[i].MAC = MACFor(uid, i)
		}
	}
	return out
}

// findNIC resolves a NIC by its MAC or its index in spec.network.
func findNIC(uid string, spec *Spec, ref string) (int, error) {
	nics := pinMACs(uid, spec.Network)
	if hw, err := net.ParseMAC(ref); err == nil {
		if i := slices.IndexFunc(nics, func(n NIC) bool { return strings.EqualFold(n.MAC, hw.String()) }); i >= 0 {
			return i, nil
		}
	} else if i, err := strconv.Atoi(ref); err == nil && i >= 0 && i < len(nics) {
		return i, nil
	}
	var have []string
	for i, n := range nics {
		have = append(have, fmt.Sprintf("%d %s", i, n.MAC))
	}
	return -1, invalid(fieldErr("nic", ref, fmt.Sprintf("the VM has no such NIC: give its MAC or index (it has: %s)", listOrNone(have))))
}

// tapRenamer renames a TAP in use (hostNet does; a HostNet without it
// leaves the TAPs after a detached NIC as they are).
type tapRenamer interface {
	RenameTAP(ctx context.Context, from, to string) error
}

// DetachNIC removes a NIC (by MAC or index) from the VM: unplugged, its
// netdev and TAP removed, when it runs. The other NICs' MACs are pinned
// into the spec first (a default MAC follows the index).
func (m *Manager) DetachNIC(ctx context.Context, ref, nic string, o NICDetachOptions) (*HotplugResult, error) {
	start := time.Now()
	vm, s, pid, done, err := m.hotplugVM(ctx, ref, "nic detach")
	if err != nil {
		return nil, err
	}
	defer done()
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	i, err := findNIC(uid, &vm.Spec, nic)
	if err != nil {
		return nil, err
	}
	nics := pinMACs(uid, vm.Spec.Network)
	n := nics[i]
	var tapErrs []error
	if s != nil {
		// its TAP, and those renamed after it, are where QEMU is
		if err := m.checkNetns(name, "nic detach", pid); err != nil {
			return nil, err
		}
		if err := m.recordHotplug(uid, pid, "nic "+n.MAC+" detached"); err != nil {
			return nil, fmt.Errorf("vm %q: nic detach: %w", name, err)
		}
		if err := s.unplug(ctx, NICDeviceID(n.MAC), timeoutOr(o.Timeout)); err != nil {
			return nil, fmt.Errorf("vm %q: nic detach %s: %w", name, n.MAC, err)
		}
		if err := s.do(ctx, "netdev_del", map[string]any{"id": NICNetdevID(n.MAC)}, nil); err != nil && !isNotFound(err) {
			m.log.Warn("netdev not deleted", "vm", name, "mac", n.MAC, "err", err)
		}
		// the device is gone: the spec follows whatever the TAPs do, and
		// a TAP left or not renamed is said, not only logged
		if err := m.opts.Net.DeleteTAP(context.WithoutCancel(ctx), m.opts.Net.TAPName(uid, i)); err != nil {
			m.log.Warn("TAP not deleted", "vm", name, "tap", m.opts.Net.TAPName(uid, i), "err", err)
			tapErrs = append(tapErrs, fmt.Errorf("its TAP %s was not deleted: %w", m.opts.Net.TAPName(uid, i), err))
		}
		// the NICs after it move down one index: so do their TAPs
		if rn, ok := m.opts.Net.(tapRenamer); ok {
			for j := i + 1; j < len(nics); j++ {
				from, to := m.opts.Net.TAPName(uid, j), m.opts.Net.TAPName(uid, j-1)
				if err := rn.RenameTAP(context.WithoutCancel(ctx), from, to); err != nil {
					m.log.Warn("TAP not renamed", "vm", name, "from", from, "to", to, "err", err)
					tapErrs = append(tapErrs, fmt.Errorf("NIC %d's TAP %s was not renamed %s: %w", j, from, to, err))
				}
			}
		}
	}
	vm.Spec.Network = slices.Delete(nics, i, i+1)
	if len(vm.Spec.Network) == 0 {
		vm.Spec.Network = nil
	}
	if err := m.commitSpec(vm, s != nil); err != nil {
		return nil, fmt.Errorf("vm %q: nic detach: %w", name, err)
	}
	res := &HotplugResult{VM: name, Device: n.MAC, Live: s != nil, Generation: vm.Metadata.Generation, Took: time.Since(start)}
	m.log.Info("nic detached", "vm", name, "mac", n.MAC, "live", res.Live, "took", res.Took)
	if len(tapErrs) > 0 {
		return res, fmt.Errorf("vm %q: nic detach %s: detached from the guest and the spec, but %w", name, n.MAC, errors.Join(tapErrs...))
	}
	return res, nil
}
