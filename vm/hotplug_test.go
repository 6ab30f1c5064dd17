package vm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFreePort(t *testing.T) {
	t.Parallel()
	port := func(id string, devs ...string) pciDevice {
		d := pciDevice{QdevID: id, PCIBridge: &struct {
			Devices []pciDevice `json:"devices"`
		}{}}
		for _, x := range devs {
			d.PCIBridge.Devices = append(d.PCIBridge.Devices, pciDevice{QdevID: x})
		}
		return d
	}
	tests := []struct {
		name  string
		devs  []pciDevice
		taken map[string]bool
		want  string // "" : ErrNoFreePort
	}{
		{"first free hot-plug port", []pciDevice{port("rp-blk-root", "blk-root"), port("rp-hp0"), port("rp-hp1")}, nil, "rp-hp0"},
		{"a used one skipped", []pciDevice{port("rp-hp0", "blk-data"), port("rp-hp1")}, nil, "rp-hp1"},
		{"numeric order", []pciDevice{port("rp-hp10"), port("rp-hp2")}, nil, "rp-hp2"},
		{"hot-plug ports before emptied cold ones", []pciDevice{port("rp-blk-old"), port("rp-hp3")}, nil, "rp-hp3"},
		{"an emptied cold port when no hot-plug one is free", []pciDevice{port("rp-hp0", "x"), port("rp-nic-525400000001")}, nil, "rp-nic-525400000001"},
		{"claimed in this operation", []pciDevice{port("rp-hp0"), port("rp-hp1")}, map[string]bool{"rp-hp0": true}, "rp-hp1"},
		{"not ours, not a bridge", []pciDevice{port("pcie.1"), {QdevID: "rp-hp0"}, {QdevID: "vser0"}}, nil, ""},
		{"all taken", []pciDevice{port("rp-hp0", "a"), port("rp-hp1", "b")}, nil, ""},
		{"none at all", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := freePort([]pciBus{{Bus: 0, Devices: tt.devs}}, tt.taken)
			if tt.want == "" {
				if !errors.Is(err, ErrNoFreePort) {
					t.Fatalf("freePort: got %q, %v; want ErrNoFreePort", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("freePort: got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// query-pci as QEMU 7.2 answers it decodes into the port choice.
func TestFreePortFromQueryPCI(t *testing.T) {
	t.Parallel()
	raw := `[{"bus":0,"devices":[{"bus":0,"slot":0,"qdev_id":"","class_info":{"desc":"Host bridge"}},
	 {"bus":0,"slot":1,"qdev_id":"rp-blk-a","pci_bridge":{"bus":{"number":1},"devices":[{"bus":1,"slot":0,"qdev_id":"blk-a"}]}},
	 {"bus":0,"slot":2,"qdev_id":"rp-hp0","pci_bridge":{"bus":{"number":2},"devices":[{"bus":2,"slot":0,"qdev_id":"blk-b"}]}},
	 {"bus":0,"slot":3,"qdev_id":"rp-hp1","pci_bridge":{"bus":{"number":3}}}]}]`
	var buses []pciBus
	if err := json.Unmarshal([]byte(raw), &buses); err != nil {
		t.Fatal(err)
	}
	if got, err := freePort(buses, nil); err != nil || got != "rp-hp1" {
		t.Fatalf("freePort: got %q, %v; want rp-hp1", got, err)
	}
}

func TestValidateDiskAdd(t *testing.T) {
	t.Parallel()
	spec := &Spec{Disks: []Disk{{Name: "root", Image: "deb"}, {Name: "disk1", Size: "1G"}}}
	kept := func(n string) bool { return n == "old" }
	tests := []struct {
		name    string
		o       DiskAddOptions
		want    Disk
		wantErr string // substring; "" : valid
	}{
		{"blank with a size", DiskAddOptions{Name: "data", Size: "2G"}, Disk{Name: "data", Size: "2G"}, ""},
		{"overlay of an image", DiskAddOptions{Name: "sys", Image: "deb"}, Disk{Name: "sys", Image: "deb"}, ""},
		{"default name skips taken ones", DiskAddOptions{Size: "1G"}, Disk{Name: "disk2", Size: "1G"}, ""},
		{"a kept file attached again", DiskAddOptions{Name: "old"}, Disk{Name: "old"}, ""},
		{"duplicate name, any case", DiskAddOptions{Name: "ROOT", Size: "1G"}, Disk{}, `spec.disks[2].name: the VM has a disk by this name (got "ROOT")`},
		{"bad name", DiskAddOptions{Name: "a b", Size: "1G"}, Disk{}, `spec.disks[2].name: must be 1-63 letters, digits or '-', starting and ending with a letter or digit (got "a b")`},
		{"bad size", DiskAddOptions{Name: "x", Size: "10Q"}, Disk{}, `spec.disks[2].size: must be a size like 512M, 10G or 1T (at least 1M) (got "10Q")`},
		{"too small", DiskAddOptions{Name: "x", Size: "1K"}, Disk{}, `at least 1M`},
		{"neither size nor image", DiskAddOptions{Name: "x"}, Disk{}, `needs a size or an image`},
		{"a kept file with a size", DiskAddOptions{Name: "old", Size: "1G"}, Disk{}, `kept from an earlier detach`},
		{"bad image name", DiskAddOptions{Name: "x", Image: "../etc"}, Disk{}, `spec.disks[2].image: must be 1-63 letters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := validateDiskAdd(spec, tt.o, kept)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("validateDiskAdd(%+v): got %+v, %v; want %+v", tt.o, got, err, tt.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("validateDiskAdd(%+v): got %v; want an invalid error with %q", tt.o, err, tt.wantErr)
			}
		})
	}
}

func TestValidateNICAdd(t *testing.T) {
	t.Parallel()
	spec := &Spec{Network: []NIC{{Network: "default", MAC: "52:54:00:00:00:01", Model: "virtio"}, {Bridge: "br0", Model: "virtio"}}}
	tests := []struct {
		name    string
		spec    *Spec
		o       NICAddOptions
		want    NIC
		wantErr string
	}{
		{"network, generated MAC", spec, NICAddOptions{Network: "lan"}, NIC{Network: "lan", MAC: MACFor(testUID, 2), Model: "virtio"}, ""},
		{"bridge, MAC and model given", spec, NICAddOptions{Bridge: "br1", MAC: "52:54:00:AA:00:01", Model: "e1000"}, NIC{Bridge: "br1", MAC: "52:54:00:aa:00:01", Model: "e1000"}, ""},
		{"generated MAC skips the user-mode NIC's", &Spec{}, NICAddOptions{Bridge: "br0"}, NIC{Bridge: "br0", MAC: MACFor(testUID, 1), Model: "virtio"}, ""},
		{"both network and bridge", spec, NICAddOptions{Network: "lan", Bridge: "br0"}, NIC{}, "give exactly one of a network or a bridge"},
		{"neither", spec, NICAddOptions{}, NIC{}, "give exactly one"},
		{"network none", spec, NICAddOptions{Network: "none"}, NIC{}, `spec.network[2].network: is no network`},
		{"bad bridge", spec, NICAddOptions{Bridge: "a bridge name too long"}, NIC{}, `spec.network[2].bridge: must be an interface name (1-15 letters, digits, '.', '-', '_') (got "a bridge name too long")`},
		{"bad model", spec, NICAddOptions{Bridge: "br0", Model: "rtl8139"}, NIC{}, `spec.network[2].model: must be virtio or e1000 (got "rtl8139")`},
		{"multicast MAC", spec, NICAddOptions{Bridge: "br0", MAC: "01:00:5e:00:00:01"}, NIC{}, `spec.network[2].mac: must be a unicast Ethernet address like 52:54:00:12:34:56 (got "01:00:5e:00:00:01")`},
		{"a MAC in use", spec, NICAddOptions{Bridge: "br0", MAC: "52:54:00:00:00:01"}, NIC{}, "another NIC of the VM has this MAC"},
		{"a MAC in use by default", spec, NICAddOptions{Bridge: "br0", MAC: MACFor(testUID, 1)}, NIC{}, "another NIC of the VM has this MAC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := validateNICAdd(testUID, tt.spec, tt.o)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("validateNICAdd(%+v): got %+v, %v; want %+v", tt.o, got, err, tt.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("validateNICAdd(%+v): got %v; want an invalid error with %q", tt.o, err, tt.wantErr)
			}
		})
	}
}

func TestFindNIC(t *testing.T) {
	t.Parallel()
	spec := &Spec{Network: []NIC{{Network: "a", MAC: "52:54:00:00:00:01"}, {Network: "b"}}}
	tests := []struct {
		ref  string
		want int
	}{
		{"0", 0}, {"1", 1}, {"52:54:00:00:00:01", 0}, {"52-54-00-00-00-01", 0}, {strings.ToUpper(MACFor(testUID, 1)), 1},
		{"2", -1}, {"-1", -1}, {"52:54:00:00:00:09", -1}, {"eth0", -1},
	}
	for _, tt := range tests {
		got, err := findNIC(testUID, spec, tt.ref)
		if got != tt.want || (tt.want < 0) != (err != nil) {
			t.Errorf("findNIC(%q): got %d, %v; want %d", tt.ref, got, err, tt.want)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "0 52:54:00:00:00:01, 1 "+MACFor(testUID, 1))) {
			t.Errorf("findNIC(%q): %v; want an invalid error listing the NICs", tt.ref, err)
		}
	}
}

func TestCheckGrow(t *testing.T) {
	t.Parallel()
	if err := checkGrow("data", 2<<30, 1<<30, "1G"); err == nil || !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), `size: is 1 GiB, smaller than disk "data"'s current 2 GiB: disks only grow (a shrink would cut off the guest's data) (got "1G")`) {
		t.Errorf("shrink: got %v; want an invalid error naming both sizes", err)
	}
	for _, want := range []int64{2 << 30, 3 << 30} {
		if err := checkGrow("data", 2<<30, want, "x"); err != nil {
			t.Errorf("checkGrow(2G -> %d): %v; want nil", want, err)
		}
	}
	for n, want := range map[int64]string{1 << 30: "1G", 3 << 20: "3M", 1536 << 20: "1536M", 1<<20 + 1: "1048577", 2 << 40: "2T"} {
		if got := sizeSpec(n); got != want {
			t.Errorf("sizeSpec(%d): got %q; want %q", n, got, want)
		}
		if back, err := ParseSize(sizeSpec(n)); err != nil || back != n {
			t.Errorf("ParseSize(sizeSpec(%d)): got %d, %v", n, back, err)
		}
	}
}

// hotFixture is a VM "running" as a stand-in process with a scripted QMP
// monitor.
type hotFixture struct {
	m   *Manager
	vm  *VirtualMachine
	mon *fakeMonitor
	q   *fakeQEMU
}

func newHotFixture(t *testing.T, status string, handle func(cmd string, args json.RawMessage) any) *hotFixture {
	t.Helper()
	qemuImg := requireQemuImg(t)
	m, _, host := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	v := kernelVM("web", testKernel(t))
	v.Spec.Disks = []Disk{{Name: "root", Size: "16M"}}
	v = mustCreate(t, m, v)
	uid := v.Metadata.UID
	l, err := m.launchFor(v, "tcg")
	if err != nil {
		t.Fatal(err)
	}
	f := &hotFixture{m: m}
	f.q = startFakeQEMU(t, m, host, uid, append([]string{"/usr/bin/qemu-system-x86_64"}, l.Args()...))
	v.Spec.Running = true
	v.Status.ObservedGeneration = v.Metadata.Generation
	if err := m.store.save(v); err != nil {
		t.Fatal(err)
	}
	f.vm = v
	f.mon = serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, args json.RawMessage) any {
		switch cmd {
		case "query-status":
			return map[string]any{"status": status, "running": status == "running"}
		case "query-pci":
			return []map[string]any{{"bus": 0, "devices": []map[string]any{
				{"qdev_id": "rp-blk-root", "pci_bridge": map[string]any{"devices": []map[string]any{{"qdev_id": "blk-root"}}}},
				{"qdev_id": "rp-hp0", "pci_bridge": map[string]any{}},
			}}}
		case "qom-list":
			return []map[string]any{{"name": "blk-root"}, {"name": "rp-hp0"}}
		}
		if handle != nil {
			return handle(cmd, args)
		}
		return nil
	}})
	return f
}

func (f *hotFixture) load(t *testing.T) *VirtualMachine {
	t.Helper()
	v, err := f.m.store.load(f.vm.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A disk hot-plug whose device_add fails undoes what it did: the block
// node goes (blockdev-del), the new file goes, the spec is as it was.
func TestAddDiskRevertsHalfWay(t *testing.T) {
	t.Parallel()
	f := newHotFixture(t, "running", func(cmd string, _ json.RawMessage) any {
		if cmd == "device_add" {
			return qmpFail{"GenericError", "Bus 'rp-hp0' does not support hotplugging"}
		}
		return nil
	})
	_, err := f.m.AddDisk(context.Background(), "web", DiskAddOptions{Name: "data", Size: "8M"})
	if err == nil || !strings.Contains(err.Error(), "does not support hotplugging") {
		t.Fatalf("AddDisk: got %v; want device_add's error", err)
	}
	got := f.mon.gotString()
	if !strings.Contains(got, "blockdev-add,device_add,blockdev-del") {
		t.Errorf("QMP: got %s; want blockdev-add, device_add, then blockdev-del (the revert)", got)
	}
	if _, err := os.Stat(f.m.diskPath(f.vm.Metadata.UID, "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the new disk file: stat %v; want it removed", err)
	}
	if v := f.load(t); !reflect.DeepEqual(v.Spec.Disks, f.vm.Spec.Disks) || v.Metadata.Generation != f.vm.Metadata.Generation {
		t.Errorf("spec: disks %+v generation %d; want unchanged %+v %d", v.Spec.Disks, v.Metadata.Generation, f.vm.Spec.Disks, f.vm.Metadata.Generation)
	}
}

// A hot-plug that works: the spec has the disk, a generation bump, and
// observedGeneration in step; Save then refuses (the command line no
// longer tells the devices).
func TestAddDiskLive(t *testing.T) {
	t.Parallel()
	var args map[string]any
	f := newHotFixture(t, "running", func(cmd string, a json.RawMessage) any {
		if cmd == "device_add" {
			json.Unmarshal(a, &args)
		}
		return nil
	})
	res, err := f.m.AddDisk(context.Background(), "web", DiskAddOptions{Name: "data", Size: "8M"})
	if err != nil {
		t.Fatalf("AddDisk: %v", err)
	}
	if !res.Live || res.Device != "data" {
		t.Errorf("result: %+v; want live, data", res)
	}
	want := map[string]any{"driver": "virtio-blk-pci", "drive": "disk-data", "id": "blk-data", "bus": "rp-hp0", "serial": "data"}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("device_add: got %v; want %v", args, want)
	}
	v := f.load(t)
	if len(v.Spec.Disks) != 2 || v.Spec.Disks[1] != (Disk{Name: "data", Size: "8M"}) {
		t.Errorf("spec.disks: got %+v; want data added", v.Spec.Disks)
	}
	if v.Metadata.Generation != f.vm.Metadata.Generation+1 || v.Status.ObservedGeneration != v.Metadata.Generation {
		t.Errorf("generation %d observed %d; want %d and in step", v.Metadata.Generation, v.Status.ObservedGeneration, f.vm.Metadata.Generation+1)
	}
	_, err = f.m.Save(context.Background(), "web")
	if !errors.Is(err, ErrHotplugged) || !strings.Contains(err.Error(), "disk data added") {
		t.Errorf("Save after a hot-plug: got %v; want ErrHotplugged naming the disk", err)
	}
}

// The guest never acknowledges the unplug: a clear timeout, the device
// left attached (no blockdev-del), the spec unchanged.
func TestDetachDiskTimeout(t *testing.T) {
	t.Parallel()
	f := newHotFixture(t, "running", nil)
	_, err := f.m.DetachDisk(context.Background(), "web", "root", DiskDetachOptions{Timeout: 200 * time.Millisecond})
	var te *UnplugTimeoutError
	if !errors.As(err, &te) || !errors.Is(err, ErrUnplugTimeout) || !strings.Contains(err.Error(), "the device stays attached and the spec is unchanged") {
		t.Fatalf("DetachDisk: got %v; want an UnplugTimeoutError", err)
	}
	if got := f.mon.got(); slices.Contains(got, "blockdev-del") || !slices.Contains(got, "device_del") {
		t.Errorf("QMP: got %v; want device_del and no blockdev-del", got)
	}
	if v := f.load(t); len(v.Spec.Disks) != 1 || v.Metadata.Generation != f.vm.Metadata.Generation {
		t.Errorf("spec: disks %+v generation %d; want unchanged", v.Spec.Disks, v.Metadata.Generation)
	}
	if _, err := os.Stat(f.m.diskPath(f.vm.Metadata.UID, "root")); err != nil {
		t.Errorf("disk file: %v; want it kept", err)
	}
}

// A paused VM takes no hot-plug: refused before any change.
func TestHotplugRefusedWhenPaused(t *testing.T) {
	t.Parallel()
	f := newHotFixture(t, "paused", nil)
	ctx := context.Background()
	ops := map[string]func() error{
		"disk add":    func() error { _, err := f.m.AddDisk(ctx, "web", DiskAddOptions{Name: "data", Size: "8M"}); return err },
		"disk detach": func() error { _, err := f.m.DetachDisk(ctx, "web", "root", DiskDetachOptions{}); return err },
		"disk resize": func() error { _, err := f.m.ResizeDisk(ctx, "web", "root", "32M"); return err },
		"nic add":     func() error { _, err := f.m.AddNIC(ctx, "web", NICAddOptions{Bridge: "br0"}); return err },
	}
	for op, do := range ops {
		err := do()
		var se *HotplugStateError
		if !errors.As(err, &se) || se.Phase != PhasePaused || !strings.Contains(err.Error(), "is Paused") || !strings.Contains(err.Error(), "resume it first") {
			t.Errorf("%s: got %v; want a HotplugStateError (Paused)", op, err)
		}
	}
	if got := f.mon.got(); slices.ContainsFunc(got, func(c string) bool { return c != "query-status" }) {
		t.Errorf("QMP: got %v; want query-status only", got)
	}
	if _, err := os.Stat(f.m.diskPath(f.vm.Metadata.UID, "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("disk file made for a refused add: %v", err)
	}
	if v := f.load(t); v.Metadata.Generation != f.vm.Metadata.Generation {
		t.Errorf("generation %d; want unchanged %d", v.Metadata.Generation, f.vm.Metadata.Generation)
	}
}

// Stopped: a resize grows the file with qemu-img and refuses a shrink,
// naming both sizes; the spec follows (no observedGeneration: not realised).
func TestResizeDiskStopped(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	v := kernelVM("web", testKernel(t))
	v.Spec.Disks = []Disk{{Name: "root", Size: "16M"}}
	v = mustCreate(t, m, v)
	ctx := context.Background()
	_, err := m.ResizeDisk(ctx, "web", "root", "8M")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `is 8 MiB, smaller than disk "root"'s current 16 MiB`) {
		t.Fatalf("shrink: got %v; want refused naming both sizes", err)
	}
	if _, err := m.ResizeDisk(ctx, "web", "nosuch", "32M"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "(it has: root)") {
		t.Errorf("unknown disk: got %v", err)
	}
	res, err := m.ResizeDisk(ctx, "web", "root", "32M")
	if err != nil || res.Live || res.Size != 32<<20 {
		t.Fatalf("resize: got %+v, %v; want 32M, not live", res, err)
	}
	if n, err := m.diskFileSize(ctx, m.diskPath(v.Metadata.UID, "root"), false); err != nil || n != 32<<20 {
		t.Errorf("file size: got %d, %v; want 32 MiB", n, err)
	}
	got, _ := m.store.load(v.Metadata.UID)
	if got.Spec.Disks[0].Size != "32M" || got.Metadata.Generation != v.Metadata.Generation+1 || got.Status.ObservedGeneration != v.Status.ObservedGeneration {
		t.Errorf("spec: size %q generation %d observed %d; want 32M, %d, unchanged", got.Spec.Disks[0].Size, got.Metadata.Generation, got.Status.ObservedGeneration, v.Metadata.Generation+1)
	}
}

// Stopped: detach keeps the file unless Delete; add with the kept name
// and no size attaches it again.
func TestDetachDiskStoppedKeepsFile(t *testing.T) {
	t.Parallel()
	qemuImg := requireQemuImg(t)
	m, _, _ := newTestManager(t)
	m.opts.QEMUImg = qemuImg
	v := kernelVM("web", testKernel(t))
	v.Spec.Disks = []Disk{{Name: "root", Size: "16M"}, {Name: "data", Size: "8M"}}
	v = mustCreate(t, m, v)
	ctx := context.Background()
	path := m.diskPath(v.Metadata.UID, "data")
	if _, err := m.DetachDisk(ctx, "web", "data", DiskDetachOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("kept file: %v", err)
	}
	if _, err := m.AddDisk(ctx, "web", DiskAddOptions{Name: "data", Size: "1G"}); err == nil || !strings.Contains(err.Error(), "kept from an earlier detach") {
		t.Fatalf("add over a kept file: got %v; want refused", err)
	}
	// a file by that name that is not qcow2 (put there by hand) is
	// refused at add: QEMU would fail to open it at the next start
	raw := m.diskPath(v.Metadata.UID, "scratch")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddDisk(ctx, "web", DiskAddOptions{Name: "scratch"}); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), `spec.disks[1].name: the file `+raw+` is raw, not qcow2`) {
		t.Fatalf("attach a raw file: got %v; want ErrInvalid naming the file and its format", err)
	}
	if got, _ := m.store.load(v.Metadata.UID); len(got.Spec.Disks) != 1 {
		t.Fatalf("spec.disks after a refused add: %+v; want root only", got.Spec.Disks)
	}
	if _, err := m.AddDisk(ctx, "web", DiskAddOptions{Name: "data"}); err != nil {
		t.Fatalf("attach the kept file again: %v", err)
	}
	got, _ := m.store.load(v.Metadata.UID)
	if len(got.Spec.Disks) != 2 || got.Spec.Disks[1] != (Disk{Name: "data", Size: "8388608"}) {
		t.Errorf("spec.disks: %+v; want data again with its size", got.Spec.Disks)
	}
	// a disk holding a snapshot is not deleted with it: refused, nothing changed
	if _, err := m.CreateSnapshot(ctx, "web", "before", SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DetachDisk(ctx, "web", "data", DiskDetachOptions{Delete: true}); !errors.Is(err, ErrHasSnapshots) || !strings.Contains(err.Error(), "before") {
		t.Fatalf("detach --delete of a disk with a snapshot: got %v; want ErrHasSnapshots naming it", err)
	}
	if got, _ := m.store.load(v.Metadata.UID); len(got.Spec.Disks) != 2 {
		t.Errorf("spec.disks after a refused detach: %+v; want both", got.Spec.Disks)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("file after a refused detach --delete: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, "web", "before"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DetachDisk(ctx, "web", "data", DiskDetachOptions{Delete: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted file: stat %v; want gone", err)
	}
}

// Stopped: a NIC detach pins the remaining NICs' MACs (the default of
// index 1 would become that of index 0).
func TestDetachNICStoppedPinsMACs(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t)
	v := kernelVM("web", testKernel(t))
	v.Spec.Network = []NIC{{Bridge: "br0"}, {Bridge: "br1"}}
	v = mustCreate(t, m, v)
	uid := v.Metadata.UID
	// a spec from before MACs were filled in at create
	v.Spec.Network[0].MAC, v.Spec.Network[1].MAC = "", ""
	if err := m.store.save(v); err != nil {
		t.Fatal(err)
	}
	if _, err := m.DetachNIC(context.Background(), "web", "0", NICDetachOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := m.store.load(uid)
	if len(got.Spec.Network) != 1 || got.Spec.Network[0].Bridge != "br1" || got.Spec.Network[0].MAC != MACFor(uid, 1) {
		t.Errorf("spec.network: %+v; want br1 with its MAC %s pinned", got.Spec.Network, MACFor(uid, 1))
	}
}

// recordingNet is a HostNet that records TAP changes (with RenameTAP).
type recordingNet struct {
	fakeNet
	mu        sync.Mutex
	ops       []string
	deleteErr error // what DeleteTAP returns
}

func (n *recordingNet) note(op string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ops = append(n.ops, op)
}

func (n *recordingNet) CreateTAP(_ context.Context, name, bridge string, _ int) error {
	n.note("create " + name + " " + bridge)
	return nil
}
func (n *recordingNet) DeleteTAP(_ context.Context, name string) error {
	n.note("delete " + name)
	return n.deleteErr
}
func (n *recordingNet) RenameTAP(_ context.Context, from, to string) error {
	n.note("rename " + from + " " + to)
	return nil
}
func (n *recordingNet) got() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.ops)
}

// A NIC hot-plug whose device_add fails removes its netdev and TAP again;
// the spec is as it was.
func TestAddNICRevertsHalfWay(t *testing.T) {
	t.Parallel()
	f := newHotFixture(t, "running", func(cmd string, _ json.RawMessage) any {
		if cmd == "device_add" {
			return qmpFail{"GenericError", "no slot"}
		}
		return nil
	})
	rn := &recordingNet{}
	f.m.opts.Net = rn
	uid := f.vm.Metadata.UID
	if _, err := f.m.AddNIC(context.Background(), "web", NICAddOptions{Bridge: "br0"}); err == nil || !strings.Contains(err.Error(), "no slot") {
		t.Fatalf("AddNIC: got %v; want device_add's error", err)
	}
	tap := rn.TAPName(uid, 0)
	if got, want := rn.got(), []string{"create " + tap + " br0", "delete " + tap}; !reflect.DeepEqual(got, want) {
		t.Errorf("TAPs: got %q; want %q", got, want)
	}
	if got := f.mon.gotString(); !strings.Contains(got, "netdev_add,device_add,netdev_del") {
		t.Errorf("QMP: got %s; want netdev_add, device_add, then netdev_del (the revert)", got)
	}
	if v := f.load(t); len(v.Spec.Network) != 0 || v.Metadata.Generation != f.vm.Metadata.Generation {
		t.Errorf("spec: network %+v generation %d; want unchanged", v.Spec.Network, v.Metadata.Generation)
	}
}

// A live detach of NIC 0 of three: its netdev and TAP go, the TAPs of the
// NICs after it are renamed down one index (NIC i's TAP is TAPName(uid, i)
// everywhere: start, stop, show, stats), the spec keeps their MACs.
func TestDetachNICLiveRenamesTAPs(t *testing.T) {
	t.Parallel()
	f := newHotFixture(t, "running", nil) // qom-list no longer names the NIC: gone
	rn := &recordingNet{}
	f.m.opts.Net = rn
	uid := f.vm.Metadata.UID
	v := f.load(t)
	v.Spec.Network = []NIC{{Bridge: "br0", MAC: "52:54:00:00:00:01", Model: "virtio"}, {Bridge: "br0", MAC: "52:54:00:00:00:02", Model: "virtio"}, {Bridge: "br1", Model: "virtio"}}
	if err := f.m.store.save(v); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.DetachNIC(context.Background(), "web", "52:54:00:00:00:01", NICDetachOptions{Timeout: 100 * time.Millisecond}); err != nil {
		t.Fatalf("DetachNIC: %v", err)
	}
	tn := func(i int) string { return rn.TAPName(uid, i) }
	want := []string{"delete " + tn(0), "rename " + tn(1) + " " + tn(0), "rename " + tn(2) + " " + tn(1)}
	if got := rn.got(); !reflect.DeepEqual(got, want) {
		t.Errorf("TAPs: got %q; want %q", got, want)
	}
	if got := f.mon.gotString(); !strings.Contains(got, "device_del") || !strings.Contains(got, "netdev_del") {
		t.Errorf("QMP: got %s; want device_del and netdev_del", got)
	}
	got := f.load(t)
	if len(got.Spec.Network) != 2 || got.Spec.Network[0].MAC != "52:54:00:00:00:02" || got.Spec.Network[1].MAC != MACFor(uid, 2) {
		t.Errorf("spec.network: %+v; want the 2nd and 3rd NICs, MACs kept (%s pinned)", got.Spec.Network, MACFor(uid, 2))
	}
	if got.Status.ObservedGeneration != got.Metadata.Generation {
		t.Errorf("observedGeneration %d, generation %d; want in step", got.Status.ObservedGeneration, got.Metadata.Generation)
	}
}

// A hot-plugged disk under a linked clone's overlay (its node disk-data
// frozen below ov-…) is still found for a live resize, which grows the
// active node the guest sees.
func TestResizeDiskLiveHotpluggedUnderOverlay(t *testing.T) {
	t.Parallel()
	var args string
	f := newHotFixture(t, "running", func(cmd string, a json.RawMessage) any {
		switch cmd {
		case "query-block":
			img := map[string]any{"virtual-size": 8 << 20}
			return []map[string]any{
				{"device": "disk-root", "qdev": "/machine/peripheral/blk-root/virtio-backend", "inserted": map[string]any{"node-name": "#block1", "image": img}},
				{"device": "", "qdev": "/machine/peripheral/blk-data/virtio-backend", "inserted": map[string]any{"node-name": "ov-0123abcd-1", "image": img}},
			}
		case "block_resize":
			args = string(a)
		}
		return nil
	})
	f.vm.Spec.Disks = append(f.vm.Spec.Disks, Disk{Name: "data", Size: "8M"})
	if err := f.m.store.save(f.vm); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.ResizeDisk(context.Background(), "web", "data", "16M"); err != nil {
		t.Fatalf("ResizeDisk: %v", err)
	}
	if want := `{"node-name":"ov-0123abcd-1","size":16777216}`; args != want {
		t.Errorf("block_resize %s; want %s", args, want)
	}
}

// A live NIC change asked from another network namespace than the VM's
// QEMU's is refused before anything changes: a detach there said
// "detached" and left the TAP on its bridge (it deleted no TAP where
// virt ran, and renamed none). A namespace that cannot be read is refused
// too (fail closed).
func TestNICChangeFromAnotherNetns(t *testing.T) {
	t.Parallel()
	const other = "net:[4026532999]"
	for _, tt := range []struct {
		name   string
		move   func(t *testing.T, f *hotFixture) // where virt and QEMU are
		want   []string
		wantIs error
	}{
		{"QEMU elsewhere", func(t *testing.T, f *hotFixture) { fakeNetns(t, filepath.Dir(f.q.proc), strconv.Itoa(f.q.pid), other) },
			[]string{"virt runs in network namespace " + testNetns + ", the VM's QEMU (pid ", ") and its TAPs in " + other + "; nothing changed"}, ErrOtherNetns},
		{"virt elsewhere", func(t *testing.T, f *hotFixture) { fakeNetns(t, filepath.Dir(f.q.proc), "self", other) },
			[]string{"virt runs in network namespace " + other + ", the VM's QEMU (pid ", "its TAPs in " + testNetns}, ErrOtherNetns},
		{"QEMU's unreadable", func(t *testing.T, f *hotFixture) { os.RemoveAll(filepath.Join(f.q.proc, "ns")) },
			[]string{"cannot tell the network namespace of its QEMU (pid ", "no such file"}, os.ErrNotExist},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newHotFixture(t, "running", nil)
			rn := &recordingNet{}
			f.m.opts.Net = rn
			v := f.load(t)
			v.Spec.Network = []NIC{{Bridge: "br0", MAC: "52:54:00:00:00:01", Model: "virtio"}, {Bridge: "br0", MAC: "52:54:00:00:00:02", Model: "virtio"}}
			if err := f.m.store.save(v); err != nil {
				t.Fatal(err)
			}
			tt.move(t, f)
			ctx := context.Background()
			for op, call := range map[string]func() error{
				"nic detach": func() error {
					_, err := f.m.DetachNIC(ctx, "web", "0", NICDetachOptions{Timeout: 100 * time.Millisecond})
					return err
				},
				"nic add": func() error { _, err := f.m.AddNIC(ctx, "web", NICAddOptions{Bridge: "br0"}); return err },
			} {
				err := call()
				var ne *NetnsError
				if !errors.As(err, &ne) || !errors.Is(err, ErrOtherNetns) || !errors.Is(err, tt.wantIs) || !strings.HasPrefix(err.Error(), `vm "web": `+op+": ") {
					t.Fatalf("%s: got %v; want a NetnsError (ErrOtherNetns, %v) for %s", op, err, tt.wantIs, op)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: got %q; want it to contain %q", op, err, w)
					}
				}
			}
			if got := rn.got(); len(got) != 0 {
				t.Errorf("TAPs: got %q; want none touched", got)
			}
			if got := f.mon.gotString(); strings.Contains(got, "device_del") || strings.Contains(got, "netdev_") || strings.Contains(got, "device_add") {
				t.Errorf("QMP: got %s; want no device or netdev command", got)
			}
			if got := f.load(t); len(got.Spec.Network) != 2 || got.Metadata.Generation != v.Metadata.Generation {
				t.Errorf("spec: network %+v generation %d; want both NICs, generation %d", got.Spec.Network, got.Metadata.Generation, v.Metadata.Generation)
			}
		})
	}
}

// A live detach whose TAP cannot be deleted is not "detached" alone: the
// NIC is gone from the guest and the spec, and the error names the TAP
// left (it was only logged).
func TestDetachNICLiveTAPLeftIsAnError(t *testing.T) {
	t.Parallel()
	f := newHotFixture(t, "running", nil)
	rn := &recordingNet{deleteErr: errors.New("device or resource busy")}
	f.m.opts.Net = rn
	uid := f.vm.Metadata.UID
	v := f.load(t)
	v.Spec.Network = []NIC{{Bridge: "br0", MAC: "52:54:00:00:00:01", Model: "virtio"}}
	if err := f.m.store.save(v); err != nil {
		t.Fatal(err)
	}
	_, err := f.m.DetachNIC(context.Background(), "web", "0", NICDetachOptions{Timeout: 100 * time.Millisecond})
	want := `vm "web": nic detach 52:54:00:00:00:01: detached from the guest and the spec, but its TAP ` + rn.TAPName(uid, 0) + ` was not deleted: device or resource busy`
	if err == nil || err.Error() != want {
		t.Errorf("DetachNIC with a TAP that stays: got %v; want %q", err, want)
	}
	if got := f.load(t); len(got.Spec.Network) != 0 {
		t.Errorf("spec.network: %+v; want the NIC gone (the guest let it go)", got.Spec.Network)
	}
}
