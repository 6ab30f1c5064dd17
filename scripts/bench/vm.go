package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/qmp"
)

// vmBench measures `virt vm start` until QEMU runs and QMP answers against
// raw `qemu-system-x86_64 -daemonize` with the very same command line, and
// `virt vm list -o json` with many defined VMs.
func vmBench(virt, guestDir string, n int) (failed bool) {
	r := newRig(virt, guestDir, "vm start / list", "vcb")
	if r == nil {
		return false
	}
	defer runCleanups()
	kernel, initrd, root, run := r.kernel, r.initrd, r.root, r.run
	run("vm", "create", "b1", "--kernel", kernel, "--initrd", initrd, "--memory", "128")

	var virtTimes, rawTimes []time.Duration
	var argv []string
	for i := 0; i < n; i++ {
		start := time.Now()
		run("vm", "start", "b1")
		virtTimes = append(virtTimes, time.Since(start))
		if argv == nil {
			argv = liveArgv(root)
		}
		run("vm", "kill", "b1")
		time.Sleep(100 * time.Millisecond) // as in the raw loop: let the old QEMU's teardown finish
	}
	// raw QEMU with the same argv: -daemonize returns once QEMU is set up
	uid := argValue(argv, "-uuid")
	pidfile := argValue(argv, "-pidfile")
	for i := 0; i < n; i++ {
		os.Remove(pidfile)
		start := time.Now()
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			fatal(fmt.Errorf("raw qemu: %v: %s", err, out))
		}
		// the same end point as virt's: QEMU runs and QMP answers
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		mon, err := qmp.Dial(ctx, strings.TrimSuffix(strings.TrimPrefix(argValue(argv, "-qmp"), "unix:path="), ",server=on,wait=off"), qmp.Options{})
		if err != nil {
			fatal(fmt.Errorf("raw qemu: QMP: %v", err))
		}
		if _, err := mon.Status(ctx); err != nil {
			fatal(fmt.Errorf("raw qemu: QMP: %v", err))
		}
		mon.Close()
		cancel()
		rawTimes = append(rawTimes, time.Since(start))
		killUnder(uid)
		time.Sleep(100 * time.Millisecond)
	}
	sortD(rawTimes)
	sortD(virtTimes)
	rawMed, virtMed := median(rawTimes), median(virtTimes)
	ratio := float64(virtMed) / float64(rawMed)
	verdict := "ok"
	if ratio > 1.3 {
		verdict, failed = "MISSED", true
	}
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "qemu -daemonize + QMP (raw)", ms(rawMed), ms(rawTimes[0]), ms(rawTimes[len(rawTimes)-1]), "-", "-")
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "virt vm start", ms(virtMed), ms(virtTimes[0]), ms(virtTimes[len(virtTimes)-1]), fmt.Sprintf("%.2fx raw", ratio), "<= 1.3x raw "+verdict)
	if virshTimes := virshBench(kernel, initrd, n); virshTimes != nil {
		vm := median(virshTimes)
		speedup := float64(vm) / float64(virtMed)
		verdict := "ok"
		if speedup < 3 {
			verdict, failed = "MISSED", true
		}
		fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "virsh start (libvirt peer)", ms(vm), ms(virshTimes[0]), ms(virshTimes[len(virshTimes)-1]),
			fmt.Sprintf("%.1fx slower", speedup), ">= 3x virt "+verdict)
	}

	// 200 defined VMs, 20 of them running
	for i := 0; i < 199; i++ {
		manifest := fmt.Sprintf("apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata: {name: l%03d}\nspec: {memoryMiB: 96, boot: {kernel: %s, initrd: %s, cmdline: console=ttyS0 quiet}}\n", i, kernel, initrd)
		cmd := exec.Command(virt, "--root", root, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			fatal(fmt.Errorf("apply: %v: %s", err, out))
		}
	}
	run("vm", "start", "b1")
	for i := 0; i < 19; i++ {
		run("vm", "start", fmt.Sprintf("l%03d", i))
	}
	// measure a steady host: booting TCG guests on 2 cores slow every QMP
	// answer, which says nothing about virt
	waitReady(root, 20, 6*time.Minute) // 20 TCG boots share 2 cores: 1.5-3 min
	var listTimes []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		out := run("vm", "list", "-o", "json")
		listTimes = append(listTimes, time.Since(start))
		if i == 0 {
			var all, entries []map[string]any
			json.Unmarshal([]byte(out), &all)
			running := 0
			for _, e := range all {
				if e["class"] != "MANAGED" {
					continue // other QEMUs on this host are listed too
				}
				entries = append(entries, e)
				if e["phase"] == "Running" {
					running++
				}
			}
			if len(entries) < 200 || running != 20 {
				fatal(fmt.Errorf("list shows %d entries, %d running; want 200 and 20", len(entries), running))
			}
		}
	}
	sortD(listTimes)
	lm := median(listTimes)
	verdict = "ok"
	if lm > 100*time.Millisecond {
		verdict, failed = "MISSED", true
	}
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "vm list -o json (200/20)", ms(lm), ms(listTimes[0]), ms(listTimes[len(listTimes)-1]), "-", "< 100ms "+verdict)
	return failed
}

// cleanups run on every exit, so no benchmark leaves a QEMU behind.
var cleanups []func()

func runCleanups() {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	runCleanups()
	os.Exit(1)
}

func sortD(d []time.Duration) { sort.Slice(d, func(a, b int) bool { return d[a] < d[b] }) }

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[len(s)/2]
}

func argValue(argv []string, flag string) string {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag {
			return argv[i+1]
		}
	}
	return ""
}

// liveArgv reads the command line of the one QEMU running under root.
func liveArgv(root string) []string {
	for _, pid := range pidsMatching(root) {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	}
	fatal(fmt.Errorf("no QEMU found under %s", root))
	return nil
}

func pidsMatching(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte("qemu-system")) && bytes.Contains(b, []byte(s)) {
			out = append(out, pid)
		}
	}
	return out
}

func killUnder(s string) {
	for _, pid := range pidsMatching(s) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// virshBench times `virsh start` of a domain equivalent to the virt VM
// (direct kernel boot, TCG, serial on a socket, virtio-rng, no graphics),
// or returns nil when libvirt does not answer (scripts/libvirt-peer.sh).
func virshBench(kernel, initrd string, n int) []time.Duration {
	virsh := func(args ...string) ([]byte, error) {
		return exec.Command("virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
	}
	if _, err := virsh("version"); err != nil {
		fmt.Printf("%-28s skipped: libvirt not answering (run scripts/libvirt-peer.sh)\n", "virsh start")
		return nil
	}
	dir, _ := os.MkdirTemp("/tmp", "vcv")
	name := "vcbench-" + filepath.Base(dir)
	xml := fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type><kernel>%s</kernel><initrd>%s</initrd><cmdline>console=ttyS0 quiet</cmdline></os>
  <devices>
    <serial type='unix'><source mode='bind' path='%s/serial.sock'/></serial>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <memballoon model='none'/>
  </devices>
</domain>`, name, kernel, initrd, dir)
	xmlPath := filepath.Join(dir, "d.xml")
	os.WriteFile(xmlPath, []byte(xml), 0o644)
	if out, err := virsh("define", xmlPath); err != nil {
		fatal(fmt.Errorf("virsh define: %v: %s", err, out))
	}
	cleanups = append(cleanups, func() { virsh("destroy", name); virsh("undefine", name); os.RemoveAll(dir) })
	var times []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if out, err := virsh("start", name); err != nil {
			fatal(fmt.Errorf("virsh start: %v: %s", err, out))
		}
		times = append(times, time.Since(start))
		virsh("destroy", name)
	}
	sortD(times)
	return times
}

// waitReady waits until want serial logs under root show the guest's ready marker.
func waitReady(root string, want int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		logs, _ := filepath.Glob(filepath.Join(root, "var/log/virtcon/vms/*/serial.log"))
		ready := 0
		for _, l := range logs {
			if b, err := os.ReadFile(l); err == nil && bytes.Contains(b, []byte("VIRTCON-GUEST-READY")) {
				ready++
			}
		}
		if ready >= want {
			time.Sleep(2 * time.Second) // let the last ones settle into their shells
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	// say which guests never got there, and where their consoles stopped
	logs, _ := filepath.Glob(filepath.Join(root, "var/log/virtcon/vms/*/serial.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if !bytes.Contains(b, []byte("VIRTCON-GUEST-READY")) {
			tail := b[max(len(b)-300, 0):]
			fmt.Fprintf(os.Stderr, "bench: not ready: %s (%d bytes of console), ends with %q\n", filepath.Base(filepath.Dir(l)), len(b), tail)
		}
	}
	fatal(fmt.Errorf("guests not ready after %v (%d logs)", timeout, len(logs)))
}
