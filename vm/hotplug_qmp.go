package vm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/qmp"
)

// pciBus and pciDevice are the parts of query-pci that port choice needs.
type pciBus struct {
	Bus     int         `json:"bus"`
	Devices []pciDevice `json:"devices"`
}

type pciDevice struct {
	QdevID    string `json:"qdev_id"`
	PCIBridge *struct {
		Devices []pciDevice `json:"devices"`
	} `json:"pci_bridge"`
}

// freePort picks the root port a hot-plugged device goes on: a free
// hot-plug port (rp-hpN, lowest N first), else a port of ours left empty
// by a device detached since the start (rp-blk-*, rp-nic-*, by name).
// Ports with a device behind them, or not ours (no "rp-" id), are never
// chosen. taken names ports already claimed in this operation.
func freePort(buses []pciBus, taken map[string]bool) (string, error) {
	var hp, other []string
	for _, b := range buses {
		for _, d := range b.Devices {
			if !strings.HasPrefix(d.QdevID, "rp-") || d.PCIBridge == nil || len(d.PCIBridge.Devices) > 0 || taken[d.QdevID] {
				continue
			}
			if strings.HasPrefix(d.QdevID, "rp-hp") {
				hp = append(hp, d.QdevID)
			} else {
				other = append(other, d.QdevID)
			}
		}
	}
	byNum := func(a, b string) int {
		if len(a) != len(b) { // rp-hp2 before rp-hp10
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	}
	slices.SortFunc(hp, byNum)
	slices.Sort(other)
	if ports := append(hp, other...); len(ports) > 0 {
		return ports[0], nil
	}
	return "", fmt.Errorf("%w: the VM's %d hot-plug ports are taken; stop and start it (every device gets its own port at start) and try again", ErrNoFreePort, HotplugPorts)
}

// hotSession is one QMP session on a running VM for a hot-plug.
type hotSession struct {
	mon   *qmp.Monitor
	name  string
	bound time.Duration // of one exchange (Manager.qmpBound)
}

// do runs one command QEMU answers at once, within one exchange's bound.
func (s *hotSession) do(ctx context.Context, cmd string, args, result any) error {
	c, cancel := context.WithTimeout(ctx, s.bound)
	defer cancel()
	return s.mon.Execute(c, cmd, args, result)
}

// isNotFound: QEMU knows no such device or node (gone already).
func isNotFound(err error) bool {
	var ce *qmp.CommandError
	if !errors.As(err, &ce) {
		return false
	}
	return ce.Class == "DeviceNotFound" || strings.Contains(ce.Desc, "not found") || strings.Contains(ce.Desc, "Failed to find") || strings.Contains(ce.Desc, "Cannot find")
}

// openHotplug opens a session on the VM's QEMU and refuses a VM that is
// paused, unresponsive or anything but running: a paused guest cannot
// acknowledge an unplug, and a change QEMU cannot confirm is not made.
func (m *Manager) openHotplug(ctx context.Context, vm *VirtualMachine, pid int, op string) (*hotSession, error) {
	name := vm.Metadata.Name
	if st, _ := m.proc.state(pid); st == "T" {
		return nil, &HotplugStateError{Name: name, Op: op, Phase: PhaseUnresponsive, Detail: "the QEMU process is stopped by a signal (SIGSTOP)"}
	}
	dctx, cancel := context.WithTimeout(ctx, m.qmpBound())
	defer cancel()
	mon, err := m.dialQMP(dctx, vm.Metadata.UID)
	if err != nil {
		return nil, &HotplugStateError{Name: name, Op: op, Phase: PhaseUnresponsive, Detail: "QMP: " + err.Error()}
	}
	st, err := mon.Status(dctx)
	if err != nil {
		mon.Close()
		return nil, &HotplugStateError{Name: name, Op: op, Phase: PhaseUnresponsive, Detail: "QMP query-status: " + err.Error()}
	}
	if st.Status != "running" {
		mon.Close()
		return nil, &HotplugStateError{Name: name, Op: op, Phase: phaseFromQMP(st.Status), Detail: "QEMU status " + st.Status}
	}
	return &hotSession{mon: mon, name: name, bound: m.qmpBound()}, nil
}

func (s *hotSession) close() { s.mon.Close() }

// port chooses a free root port (query-pci).
func (s *hotSession) port(ctx context.Context) (string, error) {
	var buses []pciBus
	if err := s.do(ctx, "query-pci", nil, &buses); err != nil {
		return "", fmt.Errorf("query-pci: %w", err)
	}
	return freePort(buses, nil)
}

// unplug asks QEMU to remove device id and waits for DEVICE_DELETED, the
// guest's acknowledgement. A device QEMU does not know is gone already
// (an acknowledgement that came after an earlier timeout).
func (s *hotSession) unplug(ctx context.Context, id string, timeout time.Duration) error {
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := s.mon.Events(ectx)
	if err != nil {
		return err
	}
	if err := s.do(ctx, "device_del", map[string]any{"id": id}, nil); err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("device_del %s: %w", id, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return fmt.Errorf("device_del %s: the monitor closed while waiting for DEVICE_DELETED", id)
			}
			if e.Event == "DEVICE_DELETED" {
				if dev, _ := e.Data["device"].(string); dev == id {
					return nil
				}
			}
		case <-t.C:
			// the event may have been missed on a busy channel: ask
			if s.deviceGone(ctx, id) {
				return nil
			}
			return &UnplugTimeoutError{Name: s.name, Device: id, After: timeout}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// deviceGone: qom-list of /machine/peripheral no longer names id.
func (s *hotSession) deviceGone(ctx context.Context, id string) bool {
	var props []struct {
		Name string `json:"name"`
	}
	if err := s.do(ctx, "qom-list", map[string]any{"path": "/machine/peripheral"}, &props); err != nil {
		return false
	}
	for _, p := range props {
		if p.Name == id {
			return false
		}
	}
	return true
}

// dropBlock closes a detached disk's block backend, so that QEMU lets go
// of the file: a hot-plugged disk's node (blockdev-add) is deleted with
// blockdev-del; a cold-plugged one's -drive, when its device's unplug left
// it, with drive_del (the monitor has no QMP command for a legacy drive).
func (s *hotSession) dropBlock(ctx context.Context, disk string) error {
	drive := DiskDriveID(disk)
	err := s.do(ctx, "blockdev-del", map[string]any{"node-name": drive}, nil)
	if err == nil || !isNotFound(err) {
		return err
	}
	b, err := s.block(ctx, disk)
	if err != nil || b.Device != drive {
		return nil // gone with its device
	}
	var out string
	if err := s.do(ctx, "human-monitor-command", map[string]any{"command-line": "drive_del " + drive}, &out); err != nil {
		return err
	}
	if out = strings.TrimSpace(out); out != "" {
		return fmt.Errorf("drive_del %s: %s", drive, out)
	}
	return nil
}

// blockInfo is the part of query-block that resize needs.
type blockInfo struct {
	Device   string `json:"device"`
	Qdev     string `json:"qdev"`
	Inserted *struct {
		NodeName string `json:"node-name"`
		Image    struct {
			VirtualSize int64 `json:"virtual-size"`
		} `json:"image"`
	} `json:"inserted"`
}

// block finds the running VM's block backend of a disk (isDiskBlock).
func (s *hotSession) block(ctx context.Context, disk string) (blockInfo, error) {
	var blocks []blockInfo
	if err := s.do(ctx, "query-block", nil, &blocks); err != nil {
		return blockInfo{}, fmt.Errorf("query-block: %w", err)
	}
	for _, b := range blocks {
		if b.Inserted != nil && isDiskBlock(disk, b.Device, b.Qdev, b.Inserted.NodeName) {
			return b, nil
		}
	}
	return blockInfo{}, fmt.Errorf("query-block: no block device %s in the running VM", DiskDriveID(disk))
}

// RenameTAP renames a TAP in use (netcfg.RenameTAP).
func (hostNet) RenameTAP(ctx context.Context, from, to string) error {
	return netcfg.RenameTAP(ctx, from, to)
}

// isDiskBlock says whether a query-block entry (its device, qdev and
// active node) is the named disk's. A cold-plugged disk's -drive is named
// by its drive id. A hot-plugged one's node is named so only until a
// linked clone of the running VM puts an overlay on it
// (blockdev-snapshot-sync): then its device is known by its qdev alone.
func isDiskBlock(disk, device, qdev, node string) bool {
	drive, dev := DiskDriveID(disk), DiskDeviceID(disk)
	return device == drive || node == drive || qdev == dev || qdev == "/machine/peripheral/"+dev+"/virtio-backend"
}

// qmpDiskID is what names a disk's active layer in QMP's device (or
// node-name) arguments: its BlockBackend when it has a named one, else
// its active node. Never the hot-plugged disk's own node name: once a
// linked clone froze it, that is a read-only backing layer, and a
// snapshot, backup or overlay of it would miss the guest's later writes.
func qmpDiskID(device, node string) string {
	if device != "" {
		return device
	}
	return node
}
