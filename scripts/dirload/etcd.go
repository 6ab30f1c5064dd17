package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// etcdCluster is n etcd members run as processes on loopback, as
// director/etcdstore/etcdtest runs them for tests (that helper takes a
// testing.TB, so a command starts its own): plain HTTP peers, data in a
// temporary directory, --unsafe-no-fsync (a benchmark of the directors,
// not of the disk).
type etcdCluster struct {
	members   []*proc
	clientURL []string
}

// buildEtcd builds the etcd member command (the etcd server code go.mod
// links) into dir, unless bin names one already.
func buildEtcd(ctx context.Context, bin, dir string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	out := filepath.Join(dir, "etcd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./scripts/etcdmember")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build the etcd member (run dirload from the repository root, or pass -etcd): %w", err)
	}
	return out, nil
}

func startEtcd(ctx context.Context, bin, dir string, n int) (*etcdCluster, error) {
	c := &etcdCluster{}
	var peers, initial []string
	for i := range n {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		c.clientURL = append(c.clientURL, "http://127.0.0.1:"+strconv.Itoa(cp))
		peers = append(peers, "http://127.0.0.1:"+strconv.Itoa(pp))
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	token := fmt.Sprintf("dirload-%d", os.Getpid())
	for i := range n {
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("m%d.log", i)))
		if err != nil {
			c.kill()
			return nil, err
		}
		cmd := exec.Command(bin,
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", c.clientURL[i], "--advertise-client-urls", c.clientURL[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", token,
			"--initial-cluster-state", "new", "--heartbeat-interval", "100", "--election-timeout", "1000",
			"--unsafe-no-fsync", "--log-level", "warn")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			c.kill()
			return nil, fmt.Errorf("start etcd member %d: %w", i, err)
		}
		p := &proc{cmd: cmd, exited: make(chan struct{})}
		go func() { _ = cmd.Wait(); logf.Close(); close(p.exited) }()
		c.members = append(c.members, p)
	}
	err := waitFor(ctx, "etcd: every member healthy", 60*time.Second, 200*time.Millisecond, func() (bool, error) {
		for _, u := range c.clientURL {
			r, err := http.Get(u + "/health")
			if err != nil {
				return false, err
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if !strings.Contains(string(b), `"health":"true"`) {
				return false, fmt.Errorf("%s/health: %s", u, b)
			}
		}
		return true, nil
	})
	if err != nil {
		c.kill()
		return nil, fmt.Errorf("%w (logs in %s)", err, dir)
	}
	return c, nil
}

func (c *etcdCluster) endpoints() string { return strings.Join(c.clientURL, ",") }

func (c *etcdCluster) kill() {
	for _, m := range c.members {
		m.kill()
	}
}
