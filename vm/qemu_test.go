package vm

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// qemuArg is one QEMU option as QEMU reads it: a flag, its raw argument,
// and for QemuOpts arguments the key=value pairs in order.
type qemuArg struct {
	Flag string
	Raw  string
	Opts [][2]string
}

// argSpec says how QEMU consumes a flag's argument.
type argSpec struct {
	hasArg  bool
	opts    bool   // parsed by QemuOpts
	prefix  string // stripped first (-qmp unix:)
	implied string // key of a first element without '='
}

// qemuFlags are the flags Args may emit.
var qemuFlags = map[string]argSpec{
	"-nodefaults": {}, "-no-user-config": {}, "-daemonize": {},
	"-uuid": {hasArg: true}, "-display": {hasArg: true}, "-smp": {hasArg: true}, "-m": {hasArg: true},
	"-pidfile": {hasArg: true}, "-serial": {hasArg: true}, "-cpu": {hasArg: true},
	"-kernel": {hasArg: true}, "-initrd": {hasArg: true}, "-append": {hasArg: true},
	"-name":    {hasArg: true, opts: true, implied: "guest"},
	"-machine": {hasArg: true, opts: true, implied: "type"},
	"-accel":   {hasArg: true, opts: true, implied: "accel"},
	"-qmp":     {hasArg: true, opts: true, prefix: "unix:", implied: "path"},
	"-chardev": {hasArg: true, opts: true, implied: "backend"},
	"-msg":     {hasArg: true, opts: true},
	"-drive":   {hasArg: true, opts: true},
	"-device":  {hasArg: true, opts: true, implied: "driver"},
	"-netdev":  {hasArg: true, opts: true, implied: "type"},
	"-vnc":     {hasArg: true, opts: true, implied: "vnc"},
}

// parseQemuOpts reads a QemuOpts string the way QEMU's
// util/qemu-option.c does: elements split on single commas (",," is a
// literal comma); "key=value", where the key ends at the first '='; a
// first element with no '=' before its first comma is the implied key's
// value; any other element without '=' is a boolean flag (key=on).
func parseQemuOpts(s, implied string) [][2]string {
	var out [][2]string
	for p, first := s, true; p != ""; first = false {
		n := strings.IndexAny(p, "=,")
		var key, val string
		switch {
		case (n < 0 || p[n] == ',') && first && implied != "":
			key = implied
			val, p = optValue(p)
		case n < 0 || p[n] == ',':
			if n < 0 {
				n = len(p)
			}
			key, val, p = p[:n], "on", strings.TrimPrefix(p[n:], ",")
		default:
			key = p[:n]
			val, p = optValue(p[n+1:])
		}
		out = append(out, [2]string{key, val})
	}
	return out
}

// optValue reads a value up to a single comma and returns the rest after it.
func optValue(p string) (string, string) {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == ',' {
			if i+1 < len(p) && p[i+1] == ',' {
				b.WriteByte(',')
				i++
				continue
			}
			return b.String(), p[i+1:]
		}
		b.WriteByte(p[i])
	}
	return b.String(), ""
}

// parseArgv walks argv as QEMU does: every flag that takes an argument
// consumes the next element, whatever it holds.
func parseArgv(argv []string) ([]qemuArg, error) {
	var out []qemuArg
	for i := 0; i < len(argv); i++ {
		spec, ok := qemuFlags[argv[i]]
		if !ok {
			return nil, fmt.Errorf("argv[%d] = %q: not a known flag", i, argv[i])
		}
		a := qemuArg{Flag: argv[i]}
		if spec.hasArg {
			if i+1 >= len(argv) {
				return nil, fmt.Errorf("%s: missing argument", argv[i])
			}
			i++
			a.Raw = argv[i]
			if spec.opts {
				s, ok := strings.CutPrefix(a.Raw, spec.prefix)
				if !ok {
					return nil, fmt.Errorf("%s %q: want prefix %q", a.Flag, a.Raw, spec.prefix)
				}
				a.Opts = parseQemuOpts(s, spec.implied)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// wantArgs is what QEMU must read from l.Args(): the structure of the
// command line, with every value exactly as given in l.
func wantArgs(l Launch) []qemuArg {
	f := func(flag string) qemuArg { return qemuArg{Flag: flag} }
	r := func(flag, raw string) qemuArg { return qemuArg{Flag: flag, Raw: raw} }
	o := func(flag string, kv ...string) qemuArg {
		a := qemuArg{Flag: flag}
		for i := 0; i < len(kv); i += 2 {
			a.Opts = append(a.Opts, [2]string{kv[i], kv[i+1]})
		}
		return a
	}
	cpu := "max"
	if l.Accel == "kvm" {
		cpu = "host"
	}
	w := []qemuArg{
		o("-name", "guest", l.Name, "debug-threads", "on"),
		r("-uuid", l.UID),
		f("-nodefaults"), f("-no-user-config"), r("-display", "none"),
		o("-machine", "type", l.Machine),
		o("-accel", "accel", l.Accel),
		r("-smp", strconv.Itoa(l.CPUs)), r("-m", strconv.Itoa(l.MemoryMiB)),
		f("-daemonize"), r("-pidfile", l.PIDFile),
		o("-qmp", "path", l.QMPSocket, "server", "on", "wait", "off"),
		o("-qmp", "path", l.EvtSocket, "server", "on", "wait", "off"),
		o("-chardev", "backend", "socket", "id", "serial0", "path", l.Serial, "server", "on", "wait", "off", "logfile", l.SerialLog, "logappend", "on"),
		r("-serial", "chardev:serial0"),
		o("-msg", "timestamp", "on"),
	}
	if l.WatchSocket != "" {
		w = append(w, o("-qmp", "path", l.WatchSocket, "server", "on", "wait", "off"))
	}
	w = append(w, r("-cpu", cpu))
	if l.Firmware == "uefi" {
		w = append(w,
			o("-drive", "if", "pflash", "format", "raw", "unit", "0", "readonly", "on", "file", l.OVMFCode),
			o("-drive", "if", "pflash", "format", "raw", "unit", "1", "file", l.OVMFVars))
	}
	// every disk and TAP NIC on its own root port, chassis numbered in
	// argv order, the free hot-plug ports after them
	chassis := 0
	port := func(dev string) string {
		chassis++
		w = append(w, o("-device", "driver", "pcie-root-port", "id", "rp-"+dev, "chassis", strconv.Itoa(chassis), "bus", "pcie.0"))
		return "rp-" + dev
	}
	for i, d := range l.Disks {
		drive, dev := "disk-"+d.Name, "blk-"+d.Name
		bus := port(dev)
		w = append(w,
			o("-drive", "file", d.Path, "format", d.Format, "if", "none", "id", drive, "discard", "unmap"),
			o("-device", "driver", "virtio-blk-pci", "drive", drive, "id", dev, "bus", bus, "serial", d.Name, "bootindex", strconv.Itoa(i+1)))
	}
	if c := l.CDROM; c != nil {
		drive := o("-drive", "if", "none", "id", "cdrom", "media", "cdrom", "readonly", "on")
		if c.ISO != "" {
			drive = o("-drive", "file", c.ISO, "format", "raw", "if", "none", "id", "cdrom", "media", "cdrom", "readonly", "on")
		}
		w = append(w,
			o("-device", "driver", "virtio-scsi-pci", "id", "cdscsi"),
			drive,
			o("-device", "driver", "scsi-cd", "bus", "cdscsi.0", "drive", "cdrom", "id", "cd0", "bootindex", strconv.Itoa(len(l.Disks)+1)))
	}
	if l.Seed != "" {
		w = append(w,
			o("-device", "driver", "virtio-scsi-pci", "id", "seedscsi"),
			o("-drive", "file", l.Seed, "format", "raw", "if", "none", "id", "seed", "media", "cdrom", "readonly", "on"),
			o("-device", "driver", "scsi-cd", "bus", "seedscsi.0", "drive", "seed"))
	}
	w = append(w,
		o("-device", "driver", "virtio-rng-pci"),
		o("-chardev", "backend", "socket", "id", "qga0", "path", l.AgentSock, "server", "on", "wait", "off"),
		o("-device", "driver", "virtio-serial-pci", "id", "vser0"),
		o("-device", "driver", "virtserialport", "bus", "vser0.0", "chardev", "qga0", "name", "org.qemu.guest_agent.0"),
	)
	if len(l.NICs) == 0 {
		w = append(w,
			o("-netdev", "type", "user", "id", "net0"),
			o("-device", "driver", "virtio-net-pci", "netdev", "net0", "romfile", "", "mac", l.MAC))
	}
	for _, n := range l.NICs {
		model := "virtio-net-pci"
		if n.Model == "e1000" {
			model = "e1000"
		}
		hex := strings.ReplaceAll(strings.ToLower(n.MAC), ":", "")
		dev, netdev := "nic-"+hex, "net-"+hex
		bus := port(dev)
		w = append(w,
			o("-netdev", "type", "tap", "id", netdev, "ifname", n.TAP, "script", "no", "downscript", "no"),
			o("-device", "driver", model, "netdev", netdev, "id", dev, "bus", bus, "romfile", "", "mac", n.MAC))
	}
	for i := range 4 {
		chassis++
		w = append(w, o("-device", "driver", "pcie-root-port", "id", "rp-hp"+strconv.Itoa(i), "chassis", strconv.Itoa(chassis), "bus", "pcie.0"))
	}
	if l.VNC != "" {
		w = append(w,
			o("-device", "driver", "VGA"),
			o("-device", "driver", "qemu-xhci", "id", "usb"),
			o("-device", "driver", "usb-tablet", "bus", "usb.0"),
			o("-vnc", "vnc", "unix:"+l.VNC))
	}
	if l.Kernel != "" {
		w = append(w, r("-kernel", l.Kernel))
		if l.Initrd != "" {
			w = append(w, r("-initrd", l.Initrd))
		}
		if l.Cmdline != "" {
			w = append(w, r("-append", l.Cmdline))
		}
	}
	return w
}

// checkArgs asserts that QEMU reads from argv exactly what wantArgs says:
// the same options in the same order, each QemuOpts string with exactly
// the expected keys (none twice) and every value intact.
func checkArgs(t *testing.T, l Launch, argv []string) {
	t.Helper()
	got, err := parseArgv(argv)
	if err != nil {
		t.Fatalf("parse %q: %v", argv, err)
	}
	want := wantArgs(l)
	if len(got) != len(want) {
		t.Fatalf("options: got %d; want %d\ngot  %q", len(got), len(want), argv)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Flag != w.Flag {
			t.Fatalf("option %d: got %s; want %s", i, g.Flag, w.Flag)
		}
		if w.Opts == nil {
			if g.Raw != w.Raw {
				t.Errorf("%s: got %q; want %q", g.Flag, g.Raw, w.Raw)
			}
			continue
		}
		gm := map[string]string{}
		for _, kv := range g.Opts {
			if _, dup := gm[kv[0]]; dup {
				t.Errorf("%s %q: got key %q twice; want it once", g.Flag, g.Raw, kv[0])
			}
			gm[kv[0]] = kv[1]
		}
		wm := map[string]string{}
		for _, kv := range w.Opts {
			wm[kv[0]] = kv[1]
		}
		if !reflect.DeepEqual(gm, wm) {
			t.Errorf("%s %q: got %q; want %q", g.Flag, g.Raw, gm, wm)
		}
	}
}

const testUID = "123e4567-e89b-12d3-a456-426614174000"

func testLaunch(dir string) Launch {
	return Launch{
		UID: testUID, Name: "web", CPUs: 2, MemoryMiB: 1024, Machine: "q35", Accel: "tcg", Firmware: "uefi",
		OVMFCode: "/usr/share/OVMF/OVMF_CODE_4M.fd", OVMFVars: dir + "/state/OVMF_VARS.fd",
		Disks:   []LaunchDisk{{Name: "root", Path: dir + "/state/disk-root.qcow2", Format: "qcow2"}, {Name: "data", Path: dir + "/state/disk-data.qcow2", Format: "qcow2"}},
		Seed:    dir + "/state/seed.iso",
		MAC:     "52:54:00:01:02:03",
		PIDFile: dir + "/run/qemu.pid", QMPSocket: dir + "/run/qmp.sock", EvtSocket: dir + "/run/qmp-events.sock",
		Serial: dir + "/run/serial.sock", SerialLog: dir + "/log/serial.log", AgentSock: dir + "/run/qga.sock",
	}
}

func TestLaunchArgs(t *testing.T) {
	t.Parallel()
	const d = "/v"
	uefi := testLaunch(d)
	bios := testLaunch(d)
	bios.Firmware, bios.Accel, bios.OVMFCode, bios.OVMFVars, bios.Disks, bios.Seed = "bios", "kvm", "", "", nil, ""
	bios.Kernel, bios.Initrd, bios.Cmdline = "/boot/vmlinuz", "/boot/initrd.img", "console=ttyS0 root=/dev/vda1 quiet"
	kernelOnly := bios
	kernelOnly.Initrd, kernelOnly.Cmdline = "", ""
	initrdNoKernel := uefi
	initrdNoKernel.Initrd, initrdNoKernel.Cmdline = "/boot/initrd.img", "quiet"
	tap := testLaunch(d)
	tap.NICs = []LaunchNIC{{TAP: "vt-web-0", MAC: "52:54:00:AA:BB:01", Model: "virtio"}, {TAP: "vt-web-1", MAC: "52:54:00:aa:bb:02", Model: "e1000"}}
	cdrom := testLaunch(d)
	cdrom.CDROM = &LaunchCDROM{ISO: "/isos/debian,12.iso"}
	cdromEmpty := bios
	cdromEmpty.Kernel, cdromEmpty.Initrd, cdromEmpty.Cmdline = "", "", ""
	cdromEmpty.Disks = []LaunchDisk{{Name: "root", Path: d + "/state/disk-root.qcow2", Format: "qcow2"}}
	cdromEmpty.CDROM = &LaunchCDROM{}
	vnc := testLaunch(d)
	vnc.VNC = d + "/run/vnc.sock"

	common := [][2]string{
		{"-uuid", testUID},
		{"-name", "guest=web,debug-threads=on"},
		{"-display", "none"},
		{"-machine", "q35"},
		{"-smp", "2"},
		{"-m", "1024"},
		{"-pidfile", d + "/run/qemu.pid"},
		{"-qmp", "unix:path=" + d + "/run/qmp.sock,server=on,wait=off"},
		{"-qmp", "unix:path=" + d + "/run/qmp-events.sock,server=on,wait=off"},
		{"-chardev", "socket,id=serial0,path=" + d + "/run/serial.sock,server=on,wait=off,logfile=" + d + "/log/serial.log,logappend=on"},
		{"-serial", "chardev:serial0"},
		{"-device", "virtio-rng-pci"},
		{"-chardev", "socket,id=qga0,path=" + d + "/run/qga.sock,server=on,wait=off"},
		{"-device", "virtio-serial-pci,id=vser0"},
		{"-device", "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0"},
	}
	userNIC := [][2]string{
		{"-netdev", "user,id=net0"},
		{"-device", "virtio-net-pci,netdev=net0,romfile=,mac=52:54:00:01:02:03"},
	}
	tests := []struct {
		name   string
		l      Launch
		want   [][2]string
		absent []string // substrings no argument may hold
	}{
		{"bios kernel kvm", bios, [][2]string{
			{"-accel", "kvm"}, {"-cpu", "host"},
			{"-kernel", "/boot/vmlinuz"}, {"-initrd", "/boot/initrd.img"}, {"-append", "console=ttyS0 root=/dev/vda1 quiet"},
		}, []string{"pflash", "virtio-blk-pci", "ide-cd", "media=cdrom", "virtio-scsi", "scsi-cd"}},
		{"kernel only", kernelOnly, [][2]string{{"-kernel", "/boot/vmlinuz"}}, []string{"-initrd", "-append"}},
		{"uefi disks seed tcg", uefi, [][2]string{
			{"-accel", "tcg"}, {"-cpu", "max"},
			{"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd"},
			{"-drive", "if=pflash,format=raw,unit=1,file=" + d + "/state/OVMF_VARS.fd"},
			{"-device", "pcie-root-port,id=rp-blk-root,chassis=1,bus=pcie.0"},
			{"-drive", "file=" + d + "/state/disk-root.qcow2,format=qcow2,if=none,id=disk-root,discard=unmap"},
			{"-device", "virtio-blk-pci,drive=disk-root,id=blk-root,bus=rp-blk-root,serial=root,bootindex=1"},
			{"-device", "pcie-root-port,id=rp-blk-data,chassis=2,bus=pcie.0"},
			{"-drive", "file=" + d + "/state/disk-data.qcow2,format=qcow2,if=none,id=disk-data,discard=unmap"},
			{"-device", "virtio-blk-pci,drive=disk-data,id=blk-data,bus=rp-blk-data,serial=data,bootindex=2"},
			{"-drive", "file=" + d + "/state/seed.iso,format=raw,if=none,id=seed,media=cdrom,readonly=on"},
			{"-device", "virtio-scsi-pci,id=seedscsi"},
			{"-device", "scsi-cd,bus=seedscsi.0,drive=seed"},
			{"-device", "pcie-root-port,id=rp-hp0,chassis=3,bus=pcie.0"},
			{"-device", "pcie-root-port,id=rp-hp3,chassis=6,bus=pcie.0"},
		}, []string{"-kernel", "-initrd", "-append", "ide-cd", "ide.", "ahci", "cdscsi", "-vnc", "VGA", "usb"}},
		{"initrd without kernel is ignored", initrdNoKernel, nil, []string{"-kernel", "-initrd", "-append"}},
		{"tap nics", tap, [][2]string{
			{"-device", "pcie-root-port,id=rp-nic-525400aabb01,chassis=3,bus=pcie.0"},
			{"-netdev", "tap,id=net-525400aabb01,ifname=vt-web-0,script=no,downscript=no"},
			{"-device", "virtio-net-pci,netdev=net-525400aabb01,id=nic-525400aabb01,bus=rp-nic-525400aabb01,romfile=,mac=52:54:00:AA:BB:01"},
			{"-device", "pcie-root-port,id=rp-nic-525400aabb02,chassis=4,bus=pcie.0"},
			{"-netdev", "tap,id=net-525400aabb02,ifname=vt-web-1,script=no,downscript=no"},
			{"-device", "e1000,netdev=net-525400aabb02,id=nic-525400aabb02,bus=rp-nic-525400aabb02,romfile=,mac=52:54:00:aa:bb:02"},
			{"-device", "pcie-root-port,id=rp-hp0,chassis=5,bus=pcie.0"},
		}, []string{"user,id=net0"}},
		{"cdrom with iso", cdrom, [][2]string{
			{"-device", "virtio-scsi-pci,id=cdscsi"},
			{"-drive", "file=/isos/debian,,12.iso,format=raw,if=none,id=cdrom,media=cdrom,readonly=on"},
			{"-device", "scsi-cd,bus=cdscsi.0,drive=cdrom,id=cd0,bootindex=3"},
		}, nil},
		{"cdrom empty", cdromEmpty, [][2]string{
			{"-device", "virtio-scsi-pci,id=cdscsi"},
			{"-drive", "if=none,id=cdrom,media=cdrom,readonly=on"},
			{"-device", "scsi-cd,bus=cdscsi.0,drive=cdrom,id=cd0,bootindex=2"},
		}, []string{"file=/isos"}},
		{"display vnc", vnc, [][2]string{
			{"-display", "none"},
			{"-device", "VGA"},
			{"-device", "qemu-xhci,id=usb"},
			{"-device", "usb-tablet,bus=usb.0"},
			{"-vnc", "vnc=unix:" + d + "/run/vnc.sock"},
		}, []string{"tcp", "0.0.0.0", "5900"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			argv := tt.l.Args()
			pairs := map[[2]string]int{}
			for i := 0; i+1 < len(argv); i++ {
				pairs[[2]string{argv[i], argv[i+1]}]++
			}
			want := append(slices.Clone(common), tt.want...)
			if len(tt.l.NICs) == 0 {
				want = append(want, userNIC...)
			}
			for _, p := range want {
				if pairs[p] == 0 {
					t.Errorf("argv: got no %s %q; want it\nargv %q", p[0], p[1], argv)
				}
			}
			for _, flag := range []string{"-nodefaults", "-no-user-config", "-daemonize"} {
				if !slices.Contains(argv, flag) {
					t.Errorf("argv: got no %s; want it", flag)
				}
			}
			if n := strings.Count(strings.Join(argv, "\x00")+"\x00", "\x00-qmp\x00"); n != 2 {
				t.Errorf("-qmp: got %d; want 2", n)
			}
			for _, a := range argv {
				for _, bad := range tt.absent {
					if strings.Contains(a, bad) {
						t.Errorf("argv element %q: got %q in it; want none", a, bad)
					}
				}
			}
			checkArgs(t, tt.l, argv)
		})
	}
}

// TestLaunchArgsSeedBus: the NoCloud seed is a read-only scsi-cd on a
// virtio-scsi controller, which every cloud kernel drives (Debian's cloud
// kernel has no AHCI, so an ide-cd on q35's SATA is invisible to it), and it
// has no bootindex, so firmware never boots it ahead of the disks.
func TestLaunchArgsSeedBus(t *testing.T) {
	t.Parallel()
	uefi := testLaunch("/v")
	kernelSeed := testLaunch("/v")
	kernelSeed.Firmware, kernelSeed.OVMFCode, kernelSeed.OVMFVars, kernelSeed.Disks = "bios", "", "", nil
	kernelSeed.Kernel, kernelSeed.Initrd = "/boot/vmlinuz", "/boot/initrd.img"
	noSeed := testLaunch("/v")
	noSeed.Seed = ""
	tests := []struct {
		name string
		l    Launch
	}{
		{"uefi with disks", uefi},
		{"direct kernel boot", kernelSeed},
		{"no seed", noSeed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args, err := parseArgv(tt.l.Args())
			if err != nil {
				t.Fatal(err)
			}
			controllers := map[string]bool{} // virtio-scsi-pci ids defined so far
			var seedDrive, seedDev map[string]string
			for _, a := range args {
				if a.Flag != "-drive" && a.Flag != "-device" {
					continue
				}
				m := map[string]string{}
				for _, kv := range a.Opts {
					m[kv[0]] = kv[1]
				}
				switch {
				case a.Flag == "-drive" && m["id"] == "seed":
					seedDrive = m
				case a.Flag == "-device" && m["driver"] == "virtio-scsi-pci":
					controllers[m["id"]] = true
				case a.Flag == "-device" && m["drive"] == "seed":
					seedDev = m
					// QEMU creates devices in argv order: the bus must exist already
					if ctrl, ok := strings.CutSuffix(m["bus"], ".0"); !ok || !controllers[ctrl] {
						t.Errorf("seed device bus: got %q; want <id>.0 of a virtio-scsi-pci defined before it (have %v)", m["bus"], controllers)
					}
				}
				if d := m["driver"]; strings.HasPrefix(d, "ide-") || strings.Contains(d, "ahci") || strings.HasPrefix(m["bus"], "ide.") {
					t.Errorf("%s %q: got an IDE/AHCI device; want none (cloud kernels lack AHCI)", a.Flag, a.Raw)
				}
			}
			if tt.l.Seed == "" {
				if seedDrive != nil || seedDev != nil || len(controllers) != 0 {
					t.Errorf("no seed: got seed drive %v, device %v, controllers %v; want none", seedDrive, seedDev, controllers)
				}
				return
			}
			if seedDrive == nil || seedDev == nil {
				t.Fatalf("seed: got drive %v, device %v; want both", seedDrive, seedDev)
			}
			if seedDrive["file"] != tt.l.Seed || seedDrive["readonly"] != "on" || seedDrive["media"] != "cdrom" || seedDrive["if"] != "none" {
				t.Errorf("seed drive: got %v; want file=%s, if=none, media=cdrom, readonly=on", seedDrive, tt.l.Seed)
			}
			if seedDev["driver"] != "scsi-cd" {
				t.Errorf("seed device driver: got %q; want scsi-cd", seedDev["driver"])
			}
			if bi, ok := seedDev["bootindex"]; ok {
				t.Errorf("seed device bootindex: got %q; want none (never a boot device ahead of the disks)", bi)
			}
		})
	}
}

// TestLaunchArgsInjection feeds hostile names and paths through Args and
// checks that QEMU would read every value back intact, with no extra key
// and no extra argv element.
func TestLaunchArgsInjection(t *testing.T) {
	t.Parallel()
	hostile := []string{
		"/tmp/a,file=/etc/shadow",
		"/tmp/a,,file=/etc/shadow",
		"x,debug-threads=off",
		"x,,",
		",",
		",,",
		"x,",
		",x",
		"/tmp/a=b",
		"path=/etc/shadow",
		"=",
		"/tmp/a=b,server=off",
		`/tmp/"quoted" 'single'`,
		"/tmp/with space/and\ttab",
		"/tmp/new\nline,wait=on",
		"/tmp/$(id)`id`;|&",
		"help",
		"?",
		"-daemonize",
		"",
		"/tmp/ünï©ødé,",
		"/tmp/a\x00b",
	}
	for _, s := range hostile {
		t.Run(strconv.Quote(s), func(t *testing.T) {
			t.Parallel()
			l := testLaunch(s)
			l.Name = s
			l.OVMFCode = s
			l.Kernel, l.Initrd, l.Cmdline = s, s+"/initrd", s
			l.Disks = append(l.Disks, LaunchDisk{Name: "extra", Path: s, Format: "raw"})
			l.CDROM = &LaunchCDROM{ISO: s}
			l.VNC = s
			l.WatchSocket = s + "/qmp-watch.sock"
			l.NICs = []LaunchNIC{{TAP: s, MAC: "52:54:00:00:00:09", Model: "virtio"}}
			checkArgs(t, l, l.Args())
			bios := l
			bios.Firmware, bios.Accel = "bios", "kvm"
			checkArgs(t, bios, bios.Args())
		})
	}
}

func FuzzLaunchArgs(f *testing.F) {
	f.Add("web", "/var/lib/virtcon")
	f.Add("x,debug-threads=off", "/tmp/a,file=/etc/shadow")
	f.Add("a,,b", "/tmp/a=b")
	f.Add("", "")
	f.Add("n\nl", "/p/'q' \"r\"")
	f.Add(",", ",,=,")
	f.Fuzz(func(t *testing.T, name, path string) {
		l := testLaunch(path)
		l.Name = name
		l.OVMFCode = path + "code"
		l.Seed = path
		l.Kernel, l.Initrd, l.Cmdline = path, path, name
		l.Disks = append(l.Disks, LaunchDisk{Name: "extra", Path: path, Format: "raw"})
		l.CDROM = &LaunchCDROM{ISO: path}
		l.VNC = path
		checkArgs(t, l, l.Args())
		bios := l
		bios.Firmware, bios.Accel, bios.Disks = "bios", "kvm", nil
		checkArgs(t, bios, bios.Args())
	})
}

func TestParseQemuOpts(t *testing.T) {
	t.Parallel()
	// The helper must itself read QemuOpts as QEMU does, or the checks
	// above prove nothing.
	tests := []struct {
		in, implied string
		want        [][2]string
	}{
		{"guest=a,debug-threads=on", "guest", [][2]string{{"guest", "a"}, {"debug-threads", "on"}}},
		{"a,,b,x=y", "guest", [][2]string{{"guest", "a,b"}, {"x", "y"}}},
		{"/tmp/a=b,server=on", "path", [][2]string{{"/tmp/a", "b"}, {"server", "on"}}},
		{"/tmp/a,,x=b,server=on", "path", [][2]string{{"path", "/tmp/a,x=b"}, {"server", "on"}}},
		{"file=a,,,b", "", [][2]string{{"file", "a,"}, {"b", "on"}}},
		{"x=a=b", "", [][2]string{{"x", "a=b"}}},
		{"x=,y=", "", [][2]string{{"x", ""}, {"y", ""}}},
		{"x=1,", "", [][2]string{{"x", "1"}}},
		{"socket", "backend", [][2]string{{"backend", "socket"}}},
	}
	for _, tt := range tests {
		if got := parseQemuOpts(tt.in, tt.implied); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseQemuOpts(%q, %q): got %q; want %q", tt.in, tt.implied, got, tt.want)
		}
	}
}

func TestMACFor(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^52:54:00(:[0-9a-f]{2}){3}$`)
	tests := []struct {
		uid   string
		index int
		want  string
	}{
		// Pinned: a MAC that changes across versions changes the guest's
		// network identity.
		{testUID, 0, "52:54:00:38:62:b7"},
		{testUID, 1, "52:54:00:ad:a9:49"},
	}
	for _, tt := range tests {
		if got := MACFor(tt.uid, tt.index); got != tt.want {
			t.Errorf("MACFor(%q, %d): got %s; want %s", tt.uid, tt.index, got, tt.want)
		}
	}
	seen := map[string]string{}
	for i := 0; i < 64; i++ {
		uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		for idx := 0; idx < 2; idx++ {
			got := MACFor(uid, idx)
			if !re.MatchString(got) {
				t.Errorf("MACFor(%q, %d): got %s; want 52:54:00:xx:xx:xx", uid, idx, got)
			}
			if again := MACFor(uid, idx); again != got {
				t.Errorf("MACFor(%q, %d): got %s then %s; want stable", uid, idx, got, again)
			}
			key := fmt.Sprintf("%s/%d", uid, idx)
			if prev, dup := seen[got]; dup {
				t.Errorf("MACFor(%s) = MACFor(%s) = %s; want distinct", key, prev, got)
			}
			seen[got] = key
		}
	}
}

// TestLaunchArgsPorts: every disk and TAP NIC sits on a PCIe root port of
// its own, defined before it (QEMU creates devices in argv order), with
// unique ids and chassis numbers, and the HotplugPorts free ports carry no
// device: hot-plug (device_add bus=rp-hpN) and hot-unplug need exactly that.
func TestLaunchArgsPorts(t *testing.T) {
	t.Parallel()
	withNICs := testLaunch("/v")
	withNICs.NICs = []LaunchNIC{{TAP: "vt0", MAC: "52:54:00:00:00:01", Model: "virtio"}, {TAP: "vt1", MAC: "52:54:00:00:00:02", Model: "e1000"}}
	withNICs.CDROM = &LaunchCDROM{ISO: "/i.iso"}
	bare := testLaunch("/v")
	bare.Disks, bare.Seed = nil, ""
	tests := []struct {
		name      string
		l         Launch
		wantPorts int
	}{
		{"disks and tap nics", withNICs, 2 + 2 + HotplugPorts},
		{"no disks, user nic", bare, HotplugPorts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args, err := parseArgv(tt.l.Args())
			if err != nil {
				t.Fatal(err)
			}
			ports := map[string]bool{}   // port id -> used by a device
			chassis := map[string]bool{} // chassis numbers seen
			ids := map[string]bool{}
			for _, a := range args {
				if a.Flag != "-device" && a.Flag != "-netdev" && a.Flag != "-drive" {
					continue
				}
				m := map[string]string{}
				for _, kv := range a.Opts {
					m[kv[0]] = kv[1]
				}
				if id := m["id"]; id != "" {
					key := a.Flag + " " + id
					if ids[key] {
						t.Errorf("%s id %q: got it twice; want unique", a.Flag, id)
					}
					ids[key] = true
				}
				if a.Flag != "-device" {
					continue
				}
				if m["driver"] == "pcie-root-port" {
					if m["bus"] != "pcie.0" || chassis[m["chassis"]] {
						t.Errorf("root port %q: bus %q chassis %q; want pcie.0 and a chassis of its own", m["id"], m["bus"], m["chassis"])
					}
					chassis[m["chassis"]] = true
					ports[m["id"]] = false
					continue
				}
				switch m["driver"] {
				case "virtio-blk-pci", "virtio-net-pci", "e1000":
					if m["netdev"] == "net0" {
						break // the user-mode NIC: not hot-pluggable
					}
					used, ok := ports[m["bus"]]
					switch {
					case !ok:
						t.Errorf("device %q: bus %q; want a root port defined before it", m["id"], m["bus"])
					case used:
						t.Errorf("device %q: port %q already taken; want one each", m["id"], m["bus"])
					}
					ports[m["bus"]] = true
				}
			}
			if len(ports) != tt.wantPorts {
				t.Errorf("root ports: got %d (%v); want %d", len(ports), ports, tt.wantPorts)
			}
			for i := range HotplugPorts {
				id := "rp-hp" + strconv.Itoa(i)
				if used, ok := ports[id]; !ok || used {
					t.Errorf("free port %s: defined %v, used %v; want defined and free", id, ok, used)
				}
			}
		})
	}
}
