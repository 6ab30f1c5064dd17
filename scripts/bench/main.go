package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

type job struct {
	name     string
	argv     []string
	okCodes  []int         // exit codes that count as a successful run
	target   time.Duration // 0: no target
	baseline string        // name of the job it is compared with
}

func main() {
	virt := flag.String("virt", "bin/virt", "path to the virt binary")
	n := flag.Int("n", 10, "runs per command")
	guest := flag.String("guest", "build/guest", "test guest directory (make guest)")
	only := flag.String("only", "", "run only the host, vm, shutdown, boot, stats, snapshot, clone or realsize benchmarks (realsize runs only when named)")
	statsVMs := flag.Int("stats-vms", 50, "running VMs for the vm stats benchmark")
	flag.Parse()
	// an interrupted run still removes its VMs and libvirt domains; a
	// closed stdout (| head) must not kill it before that either
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		fatal(fmt.Errorf("interrupted"))
	}()
	failed := false
	if *only == "" || *only == "host" {
		failed = hostBench(*virt, *n)
	}
	if *only == "" || *only == "vm" {
		failed = vmBench(*virt, *guest, *n) || failed
	}
	if *only == "" || *only == "shutdown" {
		failed = shutdownBench(*virt, *guest, *n) || failed
	}
	if *only == "" || *only == "boot" {
		failed = bootBench(*virt, *guest, *n) || failed
	}
	if *only == "" || *only == "stats" {
		failed = statsBench(*virt, *guest, *n, *statsVMs) || failed
	}
	if *only == "" || *only == "snapshot" {
		failed = snapshotBench(*virt, *guest, *n) || failed
	}
	if *only == "" || *only == "clone" {
		failed = cloneBench(*virt, *guest, *n) || failed
	}
	if *only == "realsize" { // not in the default run: it moves GiBs under TCG
		failed = realsizeBench(*virt, *guest, *n) || failed
	}
	if failed {
		os.Exit(1)
	}
}

func hostBench(virtBin string, n int) bool {
	virt := &virtBin

	jobs := []job{
		{name: "virt-host-validate qemu", argv: []string{"virt-host-validate", "qemu"}, okCodes: []int{0, 1, 2}},
		{name: "virt host info -o json", argv: []string{*virt, "host", "info", "-o", "json"}, target: 300 * time.Millisecond, baseline: "virt-host-validate qemu"},
		{name: "virt host check -o json", argv: []string{*virt, "host", "check", "-o", "json"}, okCodes: []int{0, 3}, target: time.Second, baseline: "virt-host-validate qemu"},
	}
	medians := map[string]time.Duration{}
	failed := false
	fmt.Printf("%-28s %10s %10s %10s %12s %s\n", "command", "median", "min", "max", "vs baseline", "target")
	for _, j := range jobs {
		if _, err := exec.LookPath(j.argv[0]); err != nil {
			fmt.Printf("%-28s skipped: %s not installed\n", j.name, j.argv[0])
			continue
		}
		var times []time.Duration
		for i := 0; i < n; i++ {
			d, err := timeRun(j)
			if err != nil {
				fatal(fmt.Errorf("%s: %v", j.name, err))
			}
			times = append(times, d)
		}
		sort.Slice(times, func(a, b int) bool { return times[a] < times[b] })
		med := times[len(times)/2]
		if len(times)%2 == 0 {
			med = (times[len(times)/2-1] + times[len(times)/2]) / 2
		}
		medians[j.name] = med
		ratio := "-"
		if b, ok := medians[j.baseline]; ok && med > 0 {
			ratio = fmt.Sprintf("%.2fx %s", ratioOf(b, med), fasterSlower(b, med))
		}
		tgt := "-"
		if j.target > 0 {
			verdict := "ok"
			if med > j.target {
				verdict, failed = "MISSED", true
			}
			tgt = fmt.Sprintf("< %v %s", j.target, verdict)
		}
		fmt.Printf("%-28s %10s %10s %10s %12s %s\n", j.name, ms(med), ms(times[0]), ms(times[len(times)-1]), ratio, tgt)
	}
	return failed
}

func ratioOf(base, med time.Duration) float64 {
	if med < base {
		return float64(base) / float64(med)
	}
	return float64(med) / float64(base)
}

func fasterSlower(base, med time.Duration) string {
	if med <= base {
		return "faster"
	}
	return "slower"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func timeRun(j job) (time.Duration, error) {
	cmd := exec.Command(j.argv[0], j.argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return 0, err
	}
	ok := code == 0
	for _, c := range j.okCodes {
		ok = ok || c == code
	}
	if !ok {
		return 0, fmt.Errorf("exit code %d: %s", code, stderr.String())
	}
	return d, nil
}
