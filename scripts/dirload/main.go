package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/loadgen"
	"github.com/virtcon/virtcon/enroll"
)

// seedNodes is the seed platform's own limit: etcd Raft, ~50 nodes per cluster.
const seedNodes = 50

func main() {
	bin := flag.String("director", "bin/virt-director", "path to the virt-director binary")
	n := flag.Int("n", 1000, "simulated agents")
	inFlight := flag.Int("inflight", 16, "enrolments in flight")
	warm := flag.Duration("warmup", 15*time.Second, "sessions settle this long before sampling")
	dur := flag.Duration("duration", 60*time.Second, "sampling time per heartbeat period")
	periods := flag.String("periods", "10s,1s", "heartbeat periods to measure")
	mode := flag.String("mode", "all", "what to measure: sessions (enrolment, heartbeats), dispatch (task dispatch latency), all (both), resync (inventory rebuilt after the director's etcd data loss), failover (agents moving between two replicas over a 3-member etcd cluster) or scale (heartbeats across two replicas)")
	vms := flag.Int("vms", 50, "resync: VMs per simulated agent")
	etcdBin := flag.String("etcd", "", "failover, scale: an etcd member binary (default: built from scripts/etcdmember with go build)")
	scaleN := flag.Int("scale-n", 10000, "scale: simulated agents (-n is for the other modes)")
	tasks := flag.Int("tasks", 2000, "dispatch: tasks to run")
	taskInFlight := flag.Int("task-inflight", 4, "dispatch: tasks in flight")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch *mode {
	case "all", "sessions", "dispatch":
	case "resync":
		err = runResync(ctx, *bin, *n, *vms)
	case "failover":
		err = runFailover(ctx, *bin, *etcdBin, *n)
	case "scale":
		err = runScale(ctx, *bin, *etcdBin, *scaleN, *warm, *dur)
	default:
		fmt.Fprintf(os.Stderr, "dirload: -mode %q: want sessions, dispatch, all, resync, failover or scale\n", *mode)
		os.Exit(2)
	}
	switch *mode {
	case "resync", "failover", "scale":
		if err != nil {
			fmt.Fprintln(os.Stderr, "dirload:", err)
			os.Exit(1)
		}
		return
	case "dispatch":
		*periods = ""
	}
	dispatch := func(ctx context.Context, addr string, admin directorv1connect.AdminServiceClient, ids []loadgen.Identity) error {
		if *mode == "sessions" {
			return nil
		}
		return runDispatch(ctx, addr, admin, ids, *warm, *tasks, *taskInFlight)
	}
	if err := run(ctx, *bin, *n, *inFlight, *warm, *dur, *periods, dispatch); err != nil {
		fmt.Fprintln(os.Stderr, "dirload:", err)
		os.Exit(1)
	}
}

type target struct {
	cpu float64 // % of one core
	rss float64 // MB
}

func run(ctx context.Context, bin string, n, inFlight int, warm, dur time.Duration, periods string,
	dispatch func(context.Context, string, directorv1connect.AdminServiceClient, []loadgen.Identity) error) error {
	data, err := os.MkdirTemp("", "dirload")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.CommandContext(ctx, bin, "serve", "--data", data, "--listen", addr, "--advertise", addr, "--log-level", "warn")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving on") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		return errors.New("virt-director did not say it was serving within 60 s")
	case <-ctx.Done():
		return ctx.Err()
	}
	pid := cmd.Process.Pid
	admin := director.AdminClient(filepath.Join(data, "admin.sock"))
	joins := make([]enroll.Join, n)
	for i := range joins {
		r, err := admin.CreateToken(ctx, connect.NewRequest(&directorv1.CreateTokenRequest{TtlMs: int64(time.Hour / time.Millisecond), MaxUses: 1}))
		if err != nil {
			return fmt.Errorf("token %d: %w", i, err)
		}
		if joins[i], err = enroll.ParseJoin(r.Msg.JoinString); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "dirload: %d tokens made\n", n)
	rss0, _ := rssMB(pid)
	fmt.Printf("director %s: idle RSS %.1f MB; %d agents; seed platform limit ~%d nodes per cluster (%d = %.0fx)\n", bin, rss0, n, seedNodes, n, float64(n)/seedNodes)

	d0, _ := cpuTicks(pid)
	s0 := selfCPU()
	t0 := time.Now()
	ids, err := loadgen.Enrol(ctx, joins, inFlight)
	if err != nil {
		return err
	}
	took := time.Since(t0)
	d1, _ := cpuTicks(pid)
	fmt.Printf("%-44s %8.2f s   target < 2 s (%.2fx the target); CPU: director %.2f s, the simulated agents %.2f s (same 2 cores)\n",
		fmt.Sprintf("enrol %d agents, %d in flight", n, inFlight), took.Seconds(), took.Seconds()/2,
		float64(d1-d0)/clkTck, (selfCPU() - s0).Seconds())

	targets := map[string]target{"10s": {5, 200}, "1s": {15, 200}}
	for _, p := range strings.Split(periods, ",") {
		if p == "" {
			continue
		}
		period, err := time.ParseDuration(p)
		if err != nil {
			return fmt.Errorf("-periods %q: %w", p, err)
		}
		var st loadgen.Stats
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { loadgen.Sessions(sctx, addr, "127.0.0.1", ids, period, &st); close(done) }()
		time.Sleep(warm)
		if got := st.Registered.Load(); got < int64(n) {
			cancel()
			<-done
			return fmt.Errorf("only %d of %d sessions registered after %v", got, n, warm)
		}
		c0, err := cpuTicks(pid)
		if err != nil {
			cancel()
			return err
		}
		a0, w0 := st.Acks.Load(), time.Now()
		time.Sleep(dur)
		c1, _ := cpuTicks(pid)
		a1, el := st.Acks.Load(), time.Since(w0)
		rss, _ := rssMB(pid)
		cancel()
		<-done
		cpu := float64(c1-c0) / clkTck / el.Seconds() * 100
		tg := targets[p]
		fmt.Printf("%-44s %8.1f %%   target < %.0f %% (%.2fx); RSS %.1f MB, target < %.0f MB (%.2fx); %.0f heartbeats/s answered, %d stream errors\n",
			fmt.Sprintf("%d sessions, heartbeat every %v", n, period), cpu, tg.cpu, cpu/tg.cpu, rss, tg.rss, rss/tg.rss,
			float64(a1-a0)/el.Seconds(), st.Errors.Load())
	}
	return dispatch(ctx, addr, admin, ids)
}

// runDispatch holds every agent's session (10 s heartbeats, running
// start-vm tasks at once) and runs tasks through the admin socket:
// latency from CreateTask to the agent's first status seen on WatchTask.
func runDispatch(ctx context.Context, addr string, admin directorv1connect.AdminServiceClient, ids []loadgen.Identity, warm time.Duration, tasks, inFlight int) error {
	var st loadgen.Stats
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		loadgen.SessionsWith(sctx, addr, "127.0.0.1", ids, loadgen.Options{Period: 10 * time.Second, TaskKinds: []string{"start-vm"}}, &st)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(warm + time.Minute)
	for st.Registered.Load() < int64(len(ids)) {
		if time.Now().After(deadline) {
			return fmt.Errorf("dispatch: only %d of %d sessions registered", st.Registered.Load(), len(ids))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(warm / 3) // the register-time resyncs and listings settle
	nodes := make([]string, len(ids))
	for i, id := range ids {
		nodes[i] = id.NodeID
	}
	t0 := time.Now()
	res, err := loadgen.Dispatch(ctx, admin, nodes, tasks, inFlight)
	if err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	took := time.Since(t0)
	lat := make([]time.Duration, len(res))
	srv := make([]time.Duration, len(res))
	for i, r := range res {
		lat[i], srv[i] = r.Latency, time.Duration(r.DispatchUs)*time.Microsecond
	}
	p50, p99 := pct(lat, 50), pct(lat, 99)
	fmt.Printf("%-44s p50 %6.2f ms (target < 5 ms, %.2fx), p99 %6.2f ms (target < 20 ms, %.2fx); director's dispatch_us p50 %.2f ms p99 %.2f ms; %.0f tasks/s; agents ran %d, %d delivered twice\n",
		fmt.Sprintf("%d tasks, %d in flight, %d agents: to Queued", tasks, inFlight, len(ids)),
		ms(p50), ms(p50)/5, ms(p99), ms(p99)/20, ms(pct(srv, 50)), ms(pct(srv, 99)),
		float64(tasks)/took.Seconds(), st.Tasks.Load(), st.Duplicates.Load())
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p-th percentile of ds (sorted in place).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := (len(ds)*p + 99) / 100
	return ds[min(max(i-1, 0), len(ds)-1)]
}

// clkTck is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clkTck = 100

func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// fields after the command: state(0) ... utime(11) stime(12)
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k, nil
}

// selfCPU is this process's CPU time (user + system): the simulated agents'.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rssMB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return kb / 1024, nil
		}
	}
	return 0, errors.New("no VmRSS")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
