package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// statsBench measures the collection of `virt vm stats` for many running
// VMs (paused right after their start, so that 50 TCG guests do not
// starve the machine; the collection reads the same /proc, QMP and /sys
// either way): the parallel collection (a sampler's refresh: CPU time,
// RSS, query-status, query-blockstats, query-balloon, TAP counters),
// against the same work done one VM after the other, in the same run, and
// against `ps -o pid,pcpu,rss` of the same processes (no QMP: a floor).
// The one-shot command adds its 250 ms CPU window (vm.StatsInterval) and
// is shown for reference. libvirt's `virsh domstats` would need 50
// libvirt domains beside these; it is not measured.
func statsBench(virt, guestDir string, n, vms int) (failed bool) {
	r := newRig(virt, guestDir, "vm stats", "vcs")
	if r == nil {
		return false
	}
	defer runCleanups()
	var names []string
	for i := 1; i <= vms; i++ {
		name := fmt.Sprintf("s%02d", i)
		names = append(names, name)
		r.run("vm", "create", name, "--kernel", r.kernel, "--initrd", r.initrd, "--memory", "128")
		r.run("vm", "start", name)
		r.run("vm", "pause", name)
	}
	m := vm.NewManager(vm.Options{Layout: paths.New(r.root)})
	ctx := context.Background()
	s := m.NewStatsSampler()
	st, err := s.Sample(ctx, nil) // the first readings
	if err != nil {
		fatal(fmt.Errorf("vm stats: %v", err))
	}
	entries, err := m.List(ctx)
	if err != nil {
		fatal(fmt.Errorf("vm list: %v", err))
	}
	var pids []string
	for _, e := range entries {
		if e.Class == vm.ClassManaged && e.PID > 0 {
			pids = append(pids, strconv.Itoa(e.PID))
		}
	}
	if len(st) != vms || len(pids) != vms {
		fatal(fmt.Errorf("vm stats: %d rows, %d processes; want %d", len(st), len(pids), vms))
	}
	var par, seq, ps, cli []time.Duration
	for range n {
		t := time.Now()
		st, err := s.Sample(ctx, nil)
		par = append(par, time.Since(t))
		if err != nil {
			fatal(err)
		}
		for _, x := range st {
			if !x.CPUKnown || x.RSSBytes == 0 || x.Message != "" {
				fatal(fmt.Errorf("vm stats %s: incomplete: %+v", x.Name, x))
			}
		}
		t = time.Now()
		for _, name := range names {
			if _, err := s.Sample(ctx, []string{name}); err != nil {
				fatal(err)
			}
		}
		seq = append(seq, time.Since(t))
		t = time.Now()
		if out, err := exec.Command("ps", "-o", "pid=,pcpu=,rss=", "-p", strings.Join(pids, ",")).Output(); err != nil || strings.Count(string(out), "\n") != vms {
			fatal(fmt.Errorf("ps: %v: %q", err, out))
		}
		ps = append(ps, time.Since(t))
		t = time.Now()
		r.run("vm", "stats", "-o", "json")
		cli = append(cli, time.Since(t))
	}
	for _, d := range [][]time.Duration{par, seq, ps, cli} {
		sortD(d)
	}
	target := 100 * time.Millisecond
	fmt.Printf("\n%-40s %10s %10s %10s %s\n", fmt.Sprintf("vm stats, %d running VMs", vms), "median", "min", "max", "vs")
	row := func(name string, d []time.Duration, vs string) {
		fmt.Printf("%-40s %10s %10s %10s %s\n", name, ms(median(d)), ms(d[0]), ms(d[len(d)-1]), vs)
	}
	row("sequential collection (baseline)", seq, "")
	row("ps -o pid,pcpu,rss (no QMP)", ps, "")
	verdict := "ok"
	if median(par) > target {
		verdict, failed = "MISSED", true
	}
	row("parallel collection (virt vm stats)", par, fmt.Sprintf("%.2fx %s than sequential, %.2fx %s than ps; target < %s: %s",
		ratioOf(median(seq), median(par)), fasterSlower(median(seq), median(par)),
		ratioOf(median(ps), median(par)), fasterSlower(median(ps), median(par)), ms(target), verdict))
	row("virt vm stats -o json (+250ms window)", cli, "")
	return failed
}
