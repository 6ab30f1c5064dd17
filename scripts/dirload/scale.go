package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/director/loadgen"
)

// runScale: n agents at 10 s heartbeats rotating between two replicas
// over a 3-member etcd cluster; each replica's CPU (utime+stime from
// /proc) over dur and its RSS.
func runScale(ctx context.Context, bin, etcdBin string, n int, warm, dur time.Duration) (err error) {
	const targetCPU = 15.0 // % of one core, each replica
	// one socket per agent here and per session in the replicas
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return fmt.Errorf("scale: raise RLIMIT_NOFILE to %d: %w", rl.Max, err)
		}
		if rl.Max < uint64(n)+1000 {
			return fmt.Errorf("scale: RLIMIT_NOFILE hard limit %d is too low for %d agents", rl.Max, n)
		}
	}
	tmp, clean, err := tempDir("dirload-scale")
	if err != nil {
		return err
	}
	defer clean(&err)
	p, err := startPair(ctx, bin, etcdBin, tmp)
	if err != nil {
		return err
	}
	defer p.stop()
	t0 := time.Now()
	ids, err := enrolAll(ctx, adminOf(p.data[0]), n)
	if err != nil {
		return fmt.Errorf("scale: enrol: %w", err)
	}
	fmt.Fprintf(os.Stderr, "dirload: scale: %d agents enrolled in %.1f s\n", n, time.Since(t0).Seconds())
	pl := newPlacement(n)
	var st loadgen.Stats
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		loadgen.SessionsWith(sctx, "", "127.0.0.1", ids, loadgen.Options{Period: 10 * time.Second,
			Addrs: p.addrs[:], OnRegistered: pl.registered}, &st)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	if err := waitFor(ctx, "scale: every agent registered", 5*time.Minute, 200*time.Millisecond, func() (bool, error) {
		return pl.count("") == n, nil
	}); err != nil {
		return fmt.Errorf("%w (%d of %d)", err, pl.count(""), n)
	}
	time.Sleep(warm)
	var c0 [2]int64
	for i, r := range p.reps {
		if c0[i], err = cpuTicks(r.pid()); err != nil {
			return err
		}
	}
	a0, e0, w0, s0 := st.Acks.Load(), st.Errors.Load(), time.Now(), selfCPU()
	time.Sleep(dur)
	el := time.Since(w0)
	for i, r := range p.reps {
		c1, err := cpuTicks(r.pid())
		if err != nil {
			return err
		}
		rss, _ := rssMB(r.pid())
		cpu := float64(c1-c0[i]) / clkTck / el.Seconds() * 100
		fmt.Printf("%-44s %8.1f %%   target < %.0f %% (%.2fx); RSS %.1f MB; %d sessions on it\n",
			fmt.Sprintf("scale: %d agents, 10 s heartbeats: replica %s", n, p.ids[i]), cpu, targetCPU, cpu/targetCPU, rss, pl.count(p.ids[i]))
	}
	fmt.Printf("%-44s %.0f heartbeats/s answered, %d sessions ended meanwhile; the simulated agents used %.0f %% of a core; load average %s (shared machine)\n",
		fmt.Sprintf("scale: %d agents over %v", n, el.Round(time.Second)), float64(st.Acks.Load()-a0)/el.Seconds(),
		st.Errors.Load()-e0, (selfCPU()-s0).Seconds()/el.Seconds()*100, loadavg())
	return nil
}
