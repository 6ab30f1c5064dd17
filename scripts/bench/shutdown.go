package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// shutdownBench measures, in one run with the same ten TCG guests:
// `virt host shutdown-guests --parallel 4` against the slowest single
// guest's ACPI power-off (`virt vm stop` of each alone) × ⌈10/4⌉ (target
// ≤ 1.3×); and `virt vm save` then `virt vm start` (the resume) of a
// 256 MiB guest: seconds and bytes written.
func shutdownBench(virt, guestDir string, n int) (failed bool) {
	r := newRig(virt, guestDir, "shutdown-guests / save", "vcs")
	if r == nil {
		return false
	}
	defer runCleanups()
	kernel, initrd, root, run := r.kernel, r.initrd, r.root, r.run

	const guests, parallel = 10, 4
	names := make([]string, guests)
	for i := range names {
		names[i] = fmt.Sprintf("s%02d", i)
		run("vm", "create", names[i], "--kernel", kernel, "--initrd", initrd, "--memory", "128", "--cmdline", "console=ttyS0 quiet")
	}
	boot := func(round int) {
		for _, name := range names {
			run("vm", "start", name)
		}
		waitMarkers(root, "VIRTCON-GUEST-READY", round, guests, 6*time.Minute)
	}
	// each guest's ACPI power-off alone (the others idle beside it)
	boot(1)
	var single []time.Duration
	var work time.Duration // CPU time the machine spent on the single stops
	idle := cpuBusy(time.Second)
	for _, name := range names {
		b0, start := busyNow(), time.Now()
		run("vm", "stop", name, "--timeout", "60s")
		took := time.Since(start)
		single = append(single, took)
		work += max(busyNow()-b0-time.Duration(float64(idle)*took.Seconds()), 0)
	}
	sortD(single)
	slowest := single[len(single)-1]
	// the same ten through shutdown-guests, four at a time
	boot(2)
	b0, start := busyNow(), time.Now()
	out := run("host", "shutdown-guests", "--parallel", fmt.Sprint(parallel), "--timeout", "120s", "-o", "json")
	total := time.Since(start)
	used := busyNow() - b0
	var rep struct {
		Outcomes []struct{ Name, Outcome string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		fatal(fmt.Errorf("shutdown-guests -o json: %v", err))
	}
	for _, o := range rep.Outcomes {
		if o.Outcome != "powered-off" {
			fatal(fmt.Errorf("shutdown-guests: %s %s; want every guest powered off by ACPI", o.Name, o.Outcome))
		}
	}
	if len(rep.Outcomes) != guests {
		fatal(fmt.Errorf("shutdown-guests: %d outcomes; want %d", len(rep.Outcomes), guests))
	}
	rounds := (guests + parallel - 1) / parallel
	budget := slowest * time.Duration(rounds)
	ratio := float64(total) / float64(budget)
	verdict := "ok"
	if ratio > 1.3 {
		verdict, failed = "MISSED", true
	}
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "vm stop (ACPI, each alone)", ms(median(single)), ms(single[0]), ms(slowest), "-", "-")
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", fmt.Sprintf("shutdown-guests %d/%d", guests, parallel), ms(total), "-", "-",
		fmt.Sprintf("%.2fx %d×slowest", ratio, rounds), "<= 1.3x "+verdict)
	// A TCG guest's power-off is CPU work: with fewer cores than guests
	// going down at once, the cores bound the whole, not the slowest guest.
	cores := runtime.NumCPU()
	floor := work / time.Duration(cores)
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", fmt.Sprintf("  CPU floor on %d cores", cores), ms(floor), "-", "-",
		fmt.Sprintf("%.2fx floor", float64(total)/float64(floor)),
		fmt.Sprintf("report (the single stops used %s of CPU, the shutdown %s in %s: %.0f%% of %d cores)",
			ms(work), ms(used), ms(total), 100*used.Seconds()/total.Seconds()/float64(cores), cores))

	// save + resume of a 256 MiB guest
	run("vm", "create", "big", "--kernel", kernel, "--initrd", initrd, "--memory", "256", "--cmdline", "console=ttyS0 quiet")
	run("vm", "start", "big")
	var uid string
	for _, e := range listJSON(run("vm", "list", "-o", "json")) {
		if e["name"] == "big" {
			uid, _ = e["uid"].(string)
		}
	}
	waitLogMarker(filepath.Join(root, "var/log/virtcon/vms", uid, "serial.log"), "VIRTCON-GUEST-READY", 1, 3*time.Minute)
	var saves, resumes []time.Duration
	var written int64
	for i := 0; i < max(n/3, 3); i++ {
		start := time.Now()
		var s struct{ Bytes int64 }
		json.Unmarshal([]byte(run("vm", "save", "big", "-o", "json")), &s)
		saves = append(saves, time.Since(start))
		written = s.Bytes
		start = time.Now()
		run("vm", "start", "big")
		resumes = append(resumes, time.Since(start))
	}
	sortD(saves)
	sortD(resumes)
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "vm save (256 MiB guest)", ms(median(saves)), ms(saves[0]), ms(saves[len(saves)-1]),
		humanSize(written), "report (bytes written)")
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "vm start (resume it)", ms(median(resumes)), ms(resumes[0]), ms(resumes[len(resumes)-1]), "-", "report")
	return failed
}

// busyNow is the CPU time all cores have spent not idle since boot
// (/proc/stat's first line: user nice system irq softirq steal).
func busyNow() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		fatal(err)
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var jiffies int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		jiffies += n
	}
	return time.Duration(jiffies) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// cpuBusy is the machine's CPU use per second of wall time over d, idle.
func cpuBusy(d time.Duration) time.Duration {
	b0 := busyNow()
	time.Sleep(d)
	return time.Duration(float64(busyNow()-b0) / d.Seconds())
}

func listJSON(s string) []map[string]any {
	var out []map[string]any
	json.Unmarshal([]byte(s), &out)
	return out
}

func humanSize(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// waitMarkers waits until want serial logs under root hold marker at
// least count times (a guest booted count times).
func waitMarkers(root, marker string, count, want int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		logs, _ := filepath.Glob(filepath.Join(root, "var/log/virtcon/vms/*/serial.log"))
		ready := 0
		for _, l := range logs {
			if b, err := os.ReadFile(l); err == nil && bytes.Count(b, []byte(marker)) >= count {
				ready++
			}
		}
		if ready >= want {
			time.Sleep(2 * time.Second) // let the last ones settle into their shells
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	fatal(fmt.Errorf("%d guests did not print %s %d times in %v", want, marker, count, timeout))
}

func waitLogMarker(path, marker string, count int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && bytes.Count(b, []byte(marker)) >= count {
			time.Sleep(time.Second)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	fatal(fmt.Errorf("%s: no %s after %v", path, marker, timeout))
}
