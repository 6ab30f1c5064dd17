package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

// proc is a child process (a director replica or an etcd member) that
// dies with dirload (Pdeathsig) and is killed at the end.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startDirector starts `bin serve` on data and addr (extra flags after)
// and waits until it says it is serving. Its stderr goes to logPath.
func startDirector(ctx context.Context, bin, data, addr, logPath string, extra ...string) (*proc, error) {
	args := append([]string{"serve", "--data", data, "--listen", addr, "--advertise", addr, "--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if !said && strings.Contains(sc.Text(), "serving on") {
				said = true
				close(ready)
			}
		}
		_, _ = io.Copy(logf, stderr)
		logf.Close()
	}()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	select {
	case <-ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s serve on %s exited before serving (log %s)", bin, addr, logPath)
	case <-time.After(60 * time.Second):
		p.kill()
		return nil, fmt.Errorf("%s serve on %s did not say it was serving within 60 s (log %s)", bin, addr, logPath)
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop sends SIGTERM and waits (SIGKILL after 10 s).
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

func loopback() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// enrolAll makes n one-use tokens through admin and enrols n simulated
// agents, 16 in flight.
func enrolAll(ctx context.Context, admin directorv1connect.AdminServiceClient, n int) ([]loadgen.Identity, error) {
	joins := make([]enroll.Join, n)
	for i := range joins {
		r, err := admin.CreateToken(ctx, connect.NewRequest(&directorv1.CreateTokenRequest{TtlMs: int64(time.Hour / time.Millisecond), MaxUses: 1}))
		if err != nil {
			return nil, fmt.Errorf("token %d: %w", i, err)
		}
		var err2 error
		if joins[i], err2 = enroll.ParseJoin(r.Msg.JoinString); err2 != nil {
			return nil, err2
		}
	}
	return loadgen.Enrol(ctx, joins, 16)
}

// adminOf is the admin socket client of the director on data.
func adminOf(data string) directorv1connect.AdminServiceClient {
	return director.AdminClient(filepath.Join(data, director.AdminSocketName))
}

// waitFor polls ok every step until it is true, ctx ends or within passes.
func waitFor(ctx context.Context, what string, within, step time.Duration, ok func() (bool, error)) error {
	deadline := time.Now().Add(within)
	var last error
	for {
		done, err := ok()
		if done {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("%s: not within %v (last error: %w)", what, within, last)
			}
			return fmt.Errorf("%s: not within %v", what, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
	}
}

// loadavg is /proc/loadavg's three averages, as uptime prints them.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
