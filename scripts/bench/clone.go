package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// cloneBench measures `virt vm clone --linked` of a running test guest
// with a 1 GiB qcow2 disk holding 256 MiB of data, end to end as a
// command, against a full `virt vm clone` of the same VM in the same run
// (QEMU's backup job while it runs, qemu-img convert once stopped), and
// against virt-clone (virtinst) of an equivalent shut-off libvirt domain
// where libvirt answers and virt-clone is installed; a linked clone of
// the stopped VM also against `qemu-img create -b` of an overlay on its
// disk, the least such a clone does (target: at most 2x).
func cloneBench(virt, guestDir string, n int) (failed bool) {
	r := newRig(virt, guestDir, "vm clone", "vcc")
	if r == nil {
		return false
	}
	defer runCleanups()
	r.run("vm", "create", "cb", "--kernel", r.kernel, "--initrd", r.initrd, "--memory", "128", "--disk", "1G", "--cmdline", "console=ttyS0 quiet")
	disk, _ := filepath.Glob(filepath.Join(r.root, "var/lib/virtcon/vms/*/disk-root.qcow2"))
	if len(disk) != 1 {
		fatal(fmt.Errorf("vm clone bench: no disk of cb (%q)", disk))
	}
	fill(disk[0])
	r.run("vm", "start", "cb")
	waitReady(r.root, 1, 2*time.Minute)
	timeClones := func(prefix string, k int, args ...string) []time.Duration {
		var t []time.Duration
		for i := 0; i < k; i++ {
			start := time.Now()
			r.run(append([]string{"vm", "clone", "cb", fmt.Sprintf("%s%d", prefix, i)}, args...)...)
			t = append(t, time.Since(start))
		}
		sortD(t)
		return t
	}
	row := func(name string, t []time.Duration, ratio, target string) {
		fmt.Printf("%-28s %10s %10s %10s %12s %s\n", name, ms(median(t)), ms(t[0]), ms(t[len(t)-1]), ratio, target)
	}
	full := 3 // each copies 256 MiB
	if n < full {
		full = n
	}
	linkedRun := timeClones("l", n, "--linked")
	fullRun := timeClones("f", full)
	r.run("vm", "kill", "cb")
	linkedStop, create := linkedVsCreate(r, disk[0], n)
	fullStop := timeClones("fs", full)
	lm := median(linkedRun)
	verdict := "ok"
	if lm > 300*time.Millisecond {
		verdict, failed = "MISSED", true
	}
	row("virt vm clone (full, run)", fullRun, "-", "-")
	fsRatio, vs := "-", "-"
	if vc := virtCloneBench(disk[0], full); vc != nil {
		row("virt-clone (full, shut off)", vc, "-", "-")
		fsRatio = fmt.Sprintf("%.2fx %s", ratioOf(median(vc), median(fullStop)), fasterSlower(median(vc), median(fullStop)))
		vs = "(vs virt-clone)"
	}
	row("virt vm clone (full, stop)", fullStop, fsRatio, vs)
	row("virt vm clone --linked (stop)", linkedStop, fmt.Sprintf("%.2fx %s", ratioOf(median(fullStop), median(linkedStop)), fasterSlower(median(fullStop), median(linkedStop))), "(vs full, stop)")
	cm, lsm := median(create), median(linkedStop)
	cVerdict := "ok"
	if float64(lsm) > 2*float64(cm) {
		cVerdict, failed = "MISSED", true
	}
	row("qemu-img create -b (stop)", create, "-", "-")
	row("  --linked (stop) vs create", linkedStop, fmt.Sprintf("%.2fx", float64(lsm)/float64(cm)), "<= 2x "+cVerdict+" (vs qemu-img create -b)")
	row("virt vm clone --linked (run)", linkedRun, fmt.Sprintf("%.2fx %s", ratioOf(median(fullRun), lm), fasterSlower(median(fullRun), lm)), "< 300ms "+verdict+" (vs full, run)")
	return failed
}

// linkedVsCreate times n linked clones of the stopped VM cb, each
// followed by the floor of what one does, `qemu-img create -f qcow2 -b`
// of an overlay on the VM's disk (under the same load: the two alternate).
func linkedVsCreate(r *rig, disk string, n int) (linked, create []time.Duration) {
	tmp, err := os.MkdirTemp(r.root, "ovl")
	if err != nil {
		fatal(err)
	}
	for i := 0; i < n; i++ {
		start := time.Now()
		r.run("vm", "clone", "cb", fmt.Sprintf("ls%d", i), "--linked")
		linked = append(linked, time.Since(start))
		ovl := filepath.Join(tmp, fmt.Sprintf("o%d.qcow2", i))
		start = time.Now()
		if o, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", disk, "-F", "qcow2", ovl).CombinedOutput(); err != nil {
			fatal(fmt.Errorf("qemu-img create: %v: %s", err, o))
		}
		create = append(create, time.Since(start))
	}
	sortD(linked)
	sortD(create)
	return linked, create
}

// fill writes 256 MiB of data to a stopped qcow2 disk.
func fill(disk string) {
	if o, err := exec.Command("qemu-io", "-c", "write -P 0x5a 0 256M", disk).CombinedOutput(); err != nil {
		fatal(fmt.Errorf("qemu-io write %s: %v: %s", disk, err, o))
	}
}

// virtCloneBench times virt-clone of a shut-off libvirt domain with a
// copy of the virt VM's disk (virt-clone refuses a running original);
// nil when virt-clone or libvirt is missing.
func virtCloneBench(disk string, n int) []time.Duration {
	name := "virt-clone (full, shut off)"
	if _, err := exec.LookPath("virt-clone"); err != nil {
		fmt.Printf("%-28s skipped: virt-clone not installed (apt-get install virtinst); the baseline is virt's full clone\n", name)
		return nil
	}
	virsh := func(args ...string) ([]byte, error) {
		return exec.Command("virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
	}
	if _, err := virsh("version"); err != nil {
		fmt.Printf("%-28s skipped: libvirt not answering (run scripts/libvirt-peer.sh); the baseline is virt's full clone\n", name)
		return nil
	}
	dir, _ := os.MkdirTemp("/tmp", "vccv")
	dom := "vcbench-" + filepath.Base(dir)
	src := filepath.Join(dir, "d.qcow2")
	if o, err := exec.Command("qemu-img", "convert", "-O", "qcow2", disk, src).CombinedOutput(); err != nil {
		fatal(fmt.Errorf("qemu-img convert: %v: %s", err, o))
	}
	xml := fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='%s'/><target dev='vda' bus='virtio'/></disk>
    <interface type='user'><model type='virtio'/></interface>
  </devices>
</domain>`, dom, src)
	xmlPath := filepath.Join(dir, "d.xml")
	os.WriteFile(xmlPath, []byte(xml), 0o644)
	if out, err := virsh("define", xmlPath); err != nil {
		fatal(fmt.Errorf("virsh define: %v: %s", err, out))
	}
	var clones []string
	cleanups = append(cleanups, func() {
		for _, c := range append(clones, dom) {
			virsh("undefine", c)
		}
		os.RemoveAll(dir)
	})
	var times []time.Duration
	for i := 0; i < n; i++ {
		c := fmt.Sprintf("%s-c%d", dom, i)
		start := time.Now()
		out, err := exec.Command("virt-clone", "--connect", "qemu:///system", "--original", dom, "--name", c,
			"--file", filepath.Join(dir, fmt.Sprintf("c%d.qcow2", i))).CombinedOutput()
		if err != nil {
			fmt.Printf("%-28s skipped: virt-clone failed: %v: %s\n", name, err, out)
			return nil
		}
		times = append(times, time.Since(start))
		clones = append(clones, c)
	}
	sortD(times)
	return times
}
