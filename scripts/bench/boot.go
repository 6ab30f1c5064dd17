package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/virtcon/virtcon/qmp"
)

// bootVMs and bootAutostart: the boot benchmark's host (issue 11).
const (
	bootVMs       = 20
	bootAutostart = 5
	bootMaxRuns   = 5
	bootTarget    = 1.5 // × five `virt vm start` in a row
)

// bootBench times `virt host boot` on a host with 20 defined VMs, 5 of
// them autostart with no delays, until all five answer QMP, against five
// `virt vm start` of the same VMs in a row, alternating in one run; and
// libvirt-guests' start of five domains, when libvirt answers. The
// network part of the boot has nothing to do (no network was applied
// under the bench's root): what is measured is the VMs' part.
func bootBench(virt, guestDir string, n int) (failed bool) {
	r := newRig(virt, guestDir, "host boot", "vcbb")
	if r == nil {
		return false
	}
	defer runCleanups()
	kernel, initrd, root, run := r.kernel, r.initrd, r.root, r.run
	var auto []string
	for i := range bootVMs {
		name := fmt.Sprintf("bt%02d", i)
		autostart := i%(bootVMs/bootAutostart) == 0
		if autostart {
			auto = append(auto, name)
		}
		manifest := fmt.Sprintf("apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: %s}\nspec: {memoryMiB: 96, accel: tcg, autostart: %t, boot: {kernel: %s, initrd: %s, cmdline: console=ttyS0 quiet}}\n",
			name, autostart, kernel, initrd)
		cmd := exec.Command(virt, "--root", root, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			fatal(fmt.Errorf("apply: %v: %s", err, out))
		}
	}
	uids := map[string]string{}
	var entries []struct{ Name, UID string }
	json.Unmarshal([]byte(run("vm", "list", "-o", "json")), &entries)
	for _, e := range entries {
		uids[e.Name] = e.UID
	}
	// the end point of both: QEMU runs and its QMP answers, for each
	answer := func() {
		for _, name := range auto {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			mon, err := qmp.Dial(ctx, filepath.Join(root, "run/virtcon/vms", uids[name], "qmp.sock"), qmp.Options{})
			if err == nil {
				_, err = mon.Status(ctx)
				mon.Close()
			}
			cancel()
			if err != nil {
				fatal(fmt.Errorf("%s: QMP: %v", name, err))
			}
		}
	}
	stopAll := func() {
		for _, name := range auto {
			run("vm", "kill", name)
		}
		time.Sleep(100 * time.Millisecond) // let the old QEMUs' teardown finish
	}
	runs := min(n, bootMaxRuns)
	var bootTimes, startTimes []time.Duration
	for range runs {
		start := time.Now()
		run("host", "boot", "-o", "json")
		answer()
		bootTimes = append(bootTimes, time.Since(start))
		stopAll()

		start = time.Now()
		for _, name := range auto {
			run("vm", "start", name)
		}
		answer()
		startTimes = append(startTimes, time.Since(start))
		stopAll()
	}
	sortD(bootTimes)
	sortD(startTimes)
	bm, sm := median(bootTimes), median(startTimes)
	ratio := float64(bm) / float64(sm)
	verdict := "ok"
	if ratio > bootTarget {
		verdict, failed = "MISSED", true
	}
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "5 x virt vm start", ms(sm), ms(startTimes[0]), ms(startTimes[len(startTimes)-1]), "-", "-")
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", fmt.Sprintf("host boot (%d VMs, %d auto)", bootVMs, bootAutostart), ms(bm), ms(bootTimes[0]), ms(bootTimes[len(bootTimes)-1]),
		fmt.Sprintf("%.2fx starts", ratio), fmt.Sprintf("<= %.1fx starts %s", bootTarget, verdict))
	if lg := libvirtGuestsBench(kernel, initrd, runs); lg != nil {
		m := median(lg)
		fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "libvirt-guests start (5)", ms(m), ms(lg[0]), ms(lg[len(lg)-1]),
			fmt.Sprintf("%.2fx boot", float64(m)/float64(bm)), "-")
	}
	return failed
}

// libvirtGuestsScript is where Debian's libvirt-clients installs it.
const libvirtGuestsScript = "/usr/lib/libvirt/libvirt-guests.sh"

// libvirtGuestsBench times libvirt-guests' start (ON_BOOT=start,
// START_DELAY=0) of five domains like the virt VMs: the script as
// installed, with its configuration, list and lock files moved to a temp
// directory (the host's own are never touched). It returns nil, saying
// why, when the script is missing or libvirt does not answer.
func libvirtGuestsBench(kernel, initrd string, runs int) []time.Duration {
	const name = "libvirt-guests start"
	script, err := os.ReadFile(libvirtGuestsScript)
	if err != nil {
		fmt.Printf("%-28s skipped: libvirt-guests not installed (%s)\n", name, libvirtGuestsScript)
		return nil
	}
	virsh := func(args ...string) ([]byte, error) {
		return exec.Command("virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
	}
	if _, err := virsh("version"); err != nil {
		fmt.Printf("%-28s skipped: libvirt not answering (run scripts/libvirt-peer.sh)\n", name)
		return nil
	}
	dir, err := os.MkdirTemp("/tmp", "vclg")
	if err != nil {
		fatal(err)
	}
	var domains []string
	cleanups = append(cleanups, func() {
		for _, d := range domains {
			virsh("destroy", d)
			virsh("undefine", d)
		}
		os.RemoveAll(dir)
	})
	relocated := strings.NewReplacer(`sysconfdir="/etc"`, `sysconfdir="`+dir+`/etc"`, `localstatedir="/var"`, `localstatedir="`+dir+`/var"`).Replace(string(script))
	for _, d := range []string{"etc/default", "var/lib/libvirt", "var/lock"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "libvirt-guests.sh"), []byte(relocated), 0o755)
	os.WriteFile(filepath.Join(dir, "etc/default/libvirt-guests"), []byte("URIS=qemu:///system\nON_BOOT=start\nSTART_DELAY=0\n"), 0o644)
	var uuids []string
	for i := range bootAutostart {
		d := fmt.Sprintf("vcbench-lg%d-%s", i, filepath.Base(dir))
		xml := fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name><memory unit='MiB'>96</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type><kernel>%s</kernel><initrd>%s</initrd><cmdline>console=ttyS0 quiet</cmdline></os>
  <devices>
    <serial type='unix'><source mode='bind' path='%s/serial%d.sock'/></serial>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <memballoon model='none'/>
  </devices>
</domain>`, d, kernel, initrd, dir, i)
		p := filepath.Join(dir, d+".xml")
		os.WriteFile(p, []byte(xml), 0o644)
		if out, err := virsh("define", p); err != nil {
			fatal(fmt.Errorf("virsh define: %v: %s", err, out))
		}
		domains = append(domains, d)
		out, err := virsh("domuuid", d)
		if err != nil {
			fatal(fmt.Errorf("virsh domuuid: %v: %s", err, out))
		}
		uuids = append(uuids, strings.TrimSpace(string(out)))
	}
	var times []time.Duration
	for range runs {
		// the list libvirt-guests' stop leaves for the next boot
		os.WriteFile(filepath.Join(dir, "var/lib/libvirt/libvirt-guests"), []byte("qemu:///system "+strings.Join(uuids, " ")+"\n"), 0o600)
		start := time.Now()
		out, err := exec.Command("sh", filepath.Join(dir, "libvirt-guests.sh"), "start").CombinedOutput()
		d := time.Since(start)
		if err != nil {
			fatal(fmt.Errorf("libvirt-guests start: %v: %s", err, out))
		}
		for _, dom := range domains {
			if st, _ := virsh("domstate", dom); !strings.Contains(string(st), "running") {
				fatal(fmt.Errorf("libvirt-guests start left %s %s: %s", dom, strings.TrimSpace(string(st)), out))
			}
		}
		times = append(times, d)
		for _, dom := range domains {
			virsh("destroy", dom)
		}
	}
	sortD(times)
	return times
}
