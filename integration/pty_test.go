//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a new pseudo-terminal pair. A fresh pty has a 0x0 window
// size, as a serial console reports.
func openPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, s, nil
}

// ptyProgram is a program running on its own pty; out collects what it
// writes.
type ptyProgram struct {
	cmd    *exec.Cmd
	master *os.File
	mu     sync.Mutex
	out    []byte
	done   chan struct{}
}

// startOnPTY starts argv on a fresh pty (window size 0x0 unless set).
func startOnPTY(t *testing.T, env []string, argv ...string) *ptyProgram {
	t.Helper()
	m, s, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	p := &ptyProgram{master: m, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = s, s, s
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// the master is read in a goroutine: a pty master opened with
	// os.OpenFile may not support read deadlines
	go func() {
		defer close(p.done)
		buf := make([]byte, 64<<10)
		for {
			n, err := m.Read(buf)
			p.mu.Lock()
			p.out = append(p.out, buf[:n]...)
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *ptyProgram) output() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.out...)
}

// waitOutput waits until the output contains want.
func (p *ptyProgram) waitOutput(t *testing.T, want string, timeout time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := p.output()
		if bytes.Contains(out, []byte(want)) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the program's output after %s; got %q", want, timeout, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *ptyProgram) stop() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
	p.master.Close()
	<-p.done
}
