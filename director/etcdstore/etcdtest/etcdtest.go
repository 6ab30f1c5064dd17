package etcdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// pkg is the member command's import path, built with `go build`.
const pkg = "github.com/virtcon/virtcon/scripts/etcdmember"

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// Build builds the etcd member binary once per test binary (without
// -race: the members are not under test) and returns its path. A test
// without a Go toolchain is skipped with the reason. RemoveBuilt (from
// TestMain) deletes it at the end.
func Build(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := goTool()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "etcdtest-bin"); buildErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "etcd")
		cmd := exec.Command(goTool, "build", "-o", bin, pkg)
		// The test's own flags (-race, -cover) are not the members'.
		// (same cgo setting as the rest: the build cache is shared).
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			return
		}
		buildBin = bin
		fmt.Fprintf(os.Stderr, "etcdtest: built %s in %s\n", pkg, time.Since(start).Round(10*time.Millisecond))
	})
	var skip *skipError
	switch {
	case errors.As(buildErr, &skip):
		t.Skip(skip.reason)
	case buildErr != nil:
		t.Fatal(buildErr)
	}
	return buildBin
}

// RemoveBuilt deletes what Build built (call it from TestMain after m.Run).
func RemoveBuilt() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

func goTool() (string, error) {
	if g := os.Getenv("GO"); g != "" {
		return g, nil
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	return "", &skipError{"no go toolchain in PATH to build the etcd member binary (set GO or PATH)"}
}

// Opts configure StartCluster.
type Opts struct {
	// NoFsync runs the members with --unsafe-no-fsync: faster, and what
	// is lost in a crash does not matter to a test (it does to a bench
	// that measures failover).
	NoFsync bool
}

// Cluster is a running test cluster.
type Cluster struct {
	t       testing.TB
	bin     string
	dir     string
	opts    Opts
	token   string
	initial string
	members []*member

	mu  sync.Mutex
	cli *clientv3.Client // for Status, made on first use
}

type member struct {
	name, dataDir, logPath string
	clientURL, peerURL     string
	cmd                    *exec.Cmd
	exited                 chan struct{} // closed when cmd has been waited for
}

// Timing of the members: a heartbeat every 100 ms and an election after
// 1 s of silence (etcd's defaults are 100 and 1000 too, spelled out).
const (
	HeartbeatMs = 100
	ElectionMs  = 1000
)

// StartCluster starts n members and waits until they are healthy. The
// cluster is killed and its data removed when the test ends; the members'
// logs are shown when it failed.
func StartCluster(t testing.TB, n int, opts Opts) *Cluster {
	t.Helper()
	bin := Build(t)
	if n < 1 {
		t.Fatalf("etcdtest: cluster of %d members", n)
	}
	var c *Cluster
	for attempt := 0; ; attempt++ {
		var err error
		c, err = start(t, bin, n, opts, attempt)
		if err == nil {
			break
		}
		// a port picked free may be taken again before etcd binds it
		if attempt == 0 && errors.Is(err, errBindRace) {
			t.Logf("etcdtest: %v; retrying once with other ports", err)
			continue
		}
		t.Fatalf("etcdtest: %v", err)
	}
	return c
}

var errBindRace = errors.New("a member could not bind its port")

func start(t testing.TB, bin string, n int, opts Opts, attempt int) (*Cluster, error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "etcdtest")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{t: t, bin: bin, dir: dir, opts: opts, token: fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), time.Now().UnixNano())}
	var initial []string
	for i := range n {
		m := &member{
			name:      "m" + strconv.Itoa(i),
			dataDir:   filepath.Join(dir, "m"+strconv.Itoa(i)),
			logPath:   filepath.Join(dir, "m"+strconv.Itoa(i)+".log"),
			clientURL: "http://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			peerURL:   "http://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL)
	}
	c.initial = strings.Join(initial, ",")
	cleanup := func(failed bool) {
		for i := range c.members {
			c.kill(i)
		}
		c.mu.Lock()
		if c.cli != nil {
			c.cli.Close()
		}
		c.mu.Unlock()
		if failed {
			c.showLogs()
		}
		os.RemoveAll(dir)
	}
	for i := range c.members {
		if err := c.startMember(i, "new"); err != nil {
			cleanup(true)
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	if err := c.WaitHealthy(ctx); err != nil {
		bindRace := false
		for _, m := range c.members {
			if b, _ := os.ReadFile(m.logPath); bytes.Contains(b, []byte("address already in use")) {
				bindRace = true
			}
		}
		if bindRace && attempt == 0 {
			cleanup(false)
			return nil, fmt.Errorf("%w: %v", errBindRace, err)
		}
		cleanup(true)
		return nil, err
	}
	t.Logf("etcdtest: %d members healthy after %s (%s)", n, time.Since(began).Round(time.Millisecond), strings.Join(c.Endpoints(), " "))
	t.Cleanup(func() { cleanup(t.Failed()) })
	return c, nil
}

// freePorts picks n distinct loopback ports: listen on each, then close
// them all (a member binds its port a moment later; StartCluster retries
// once if another process took one meanwhile).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) startMember(i int, state string) error {
	m := c.members[i]
	args := []string{
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.clientURL,
		"--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", c.initial,
		"--initial-cluster-token", c.token,
		"--initial-cluster-state", state,
		"--heartbeat-interval", strconv.Itoa(HeartbeatMs),
		"--election-timeout", strconv.Itoa(ElectionMs),
		"--log-level", "info",
	}
	if c.opts.NoFsync {
		args = append(args, "--unsafe-no-fsync")
	}
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== etcdtest: start %s (%s) at %s\n", m.name, state, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// members die with the test binary, even when it is killed
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start member %s: %w", m.name, err)
	}
	m.cmd = cmd
	m.exited = make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(m.exited)
	}()
	return nil
}

// Endpoints are the members' client URLs, member i at index i.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL
	}
	return out
}

// Len is the number of members.
func (c *Cluster) Len() int { return len(c.members) }

// LogPath is member i's log file.
func (c *Cluster) LogPath(i int) string { return c.members[i].logPath }

// PID is member i's process id, 0 when it is not running.
func (c *Cluster) PID(i int) int {
	m := c.members[i]
	if !c.running(i) {
		return 0
	}
	return m.cmd.Process.Pid
}

func (c *Cluster) running(i int) bool {
	m := c.members[i]
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Kill sends member i SIGKILL and waits until it is gone.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.kill(i)
}

func (c *Cluster) kill(i int) {
	m := c.members[i]
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
}

// Restart starts member i again on its data dir and ports (killing it
// first if it runs). It returns at once; WaitHealthy waits for it.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.kill(i)
	if err := c.startMember(i, "existing"); err != nil {
		c.t.Fatalf("etcdtest: restart member %d: %v", i, err)
	}
}

func (c *Cluster) client() (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cli != nil {
		return c.cli, nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	c.cli = cli
	return cli, nil
}

// Leader is the index of the member that leads, as the running members
// report it; -1 when none does (or none answers before ctx ends).
func (c *Cluster) Leader(ctx context.Context) int {
	cli, err := c.client()
	if err != nil {
		return -1
	}
	for i, m := range c.members {
		if !c.running(i) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		st, err := cli.Status(sctx, m.clientURL)
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		if st.Leader == st.Header.MemberId {
			return i
		}
		for j, o := range c.members {
			if j == i || !c.running(j) {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			ost, err := cli.Status(sctx, o.clientURL)
			cancel()
			if err == nil && ost.Header.MemberId == st.Leader {
				return j
			}
		}
	}
	return -1
}

// WaitHealthy waits until every running member answers and they agree on
// one leader, and a linearizable read through the cluster succeeds.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	cli, err := c.client()
	if err != nil {
		return err
	}
	var last error
	for {
		last = c.healthy(ctx, cli)
		if last == nil {
			return nil
		}
		for i, m := range c.members {
			if m.cmd != nil && !c.running(i) && m.cmd.ProcessState != nil && m.cmd.ProcessState.Exited() {
				return fmt.Errorf("member %s exited: %s (log %s)", m.name, m.cmd.ProcessState, m.logPath)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy: %v: %w", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context, cli *clientv3.Client) error {
	var leader uint64
	for i, m := range c.members {
		if !c.running(i) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.clientURL)
		cancel()
		if err != nil {
			return fmt.Errorf("member %s: %w", m.name, err)
		}
		if st.Leader == 0 {
			return fmt.Errorf("member %s: no leader", m.name)
		}
		if leader != 0 && st.Leader != leader {
			return fmt.Errorf("members disagree on the leader")
		}
		leader = st.Leader
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := cli.Get(sctx, "etcdtest-health"); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

// showLogs prints the tail of every member's log (a failed test).
func (c *Cluster) showLogs() {
	for _, m := range c.members {
		b, err := os.ReadFile(m.logPath)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		c.t.Logf("etcdtest: member %s log (%s), last %d lines:\n%s", m.name, m.logPath, len(lines), strings.Join(lines, "\n"))
	}
}
