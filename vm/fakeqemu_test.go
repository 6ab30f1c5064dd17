package vm

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A QEMU stand-in for the lifecycle tests: a real process (sleep) that the
// fake /proc under the manager's host root shows as the VM's QEMU, so that
// livePID, gone and killVerified act on it (a SIGKILL reaches only that
// sleep), and a QMP monitor on the VM's socket whose answers the test
// scripts.

// fakeQEMU is a live stand-in QEMU process.
type fakeQEMU struct {
	pid    int
	proc   string // its fake /proc/<pid>
	exited chan struct{}
}

// spawnStandIn starts the stand-in process (a sleep), not yet shown in
// the fake /proc under host.
func spawnStandIn(t *testing.T, host string) *fakeQEMU {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	q := &fakeQEMU{pid: cmd.Process.Pid, exited: make(chan struct{}), proc: filepath.Join(host, "proc", strconv.Itoa(cmd.Process.Pid))}
	go func() {
		cmd.Wait()
		q.exit() // as a killed QEMU leaves /proc
		close(q.exited)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-q.exited })
	return q
}

// startFakeQEMU starts the stand-in for vm: a sleep the fake /proc shows
// with argv (qemuArgv(uid) when nil), named by the VM's pidfile.
func startFakeQEMU(t *testing.T, m *Manager, host string, uid string, argv []string) *fakeQEMU {
	t.Helper()
	q := spawnStandIn(t, host)
	if argv == nil {
		argv = qemuArgv(uid)
	}
	fakeProc(t, filepath.Dir(q.proc), q.pid, "S", argv...)
	if err := os.MkdirAll(m.layout().VMRunDir(uid), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.runPath(uid, pidFileName), []byte(strconv.Itoa(q.pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return q
}

// alive reports whether the stand-in process still runs (nothing killed it).
func (q *fakeQEMU) alive() bool {
	select {
	case <-q.exited:
		return false
	default:
		return true
	}
}

// exit makes the fake /proc show the QEMU gone (the process lives on: the
// test ends it).
func (q *fakeQEMU) exit() { os.RemoveAll(q.proc) }

// qmpReply values a fakeMonitor handler may return besides a plain return
// value (nil is {}).
type (
	// qmpFail is an error reply.
	qmpFail struct{ class, desc string }
	// qmpHangUp closes the connection instead of replying (QEMU exiting).
	qmpHangUp struct{}
)

// fakeMonitor is a QMP server with a scripted greeting and answers.
type fakeMonitor struct {
	version [3]int
	pkg     string
	handle  func(cmd string, args json.RawMessage) any

	mu       sync.Mutex
	commands []string
}

// serveMonitor serves f on path (the VM's QMP socket, or any socket).
func serveMonitor(t *testing.T, path string, f *fakeMonitor) *fakeMonitor {
	t.Helper()
	if f.version == [3]int{} {
		f.version = [3]int{7, 2, 22}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.serve(c)
		}
	}()
	return f
}

// setVersion changes the greeting of the connections to come (the
// server's goroutine reads it).
func (f *fakeMonitor) setVersion(v [3]int, pkg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version, f.pkg = v, pkg
}

func (f *fakeMonitor) serve(c net.Conn) {
	defer c.Close()
	enc := json.NewEncoder(c)
	f.mu.Lock()
	version, pkg := f.version, f.pkg
	f.mu.Unlock()
	enc.Encode(map[string]any{"QMP": map[string]any{
		"version":      map[string]any{"qemu": map[string]int{"major": version[0], "minor": version[1], "micro": version[2]}, "package": pkg},
		"capabilities": []string{}}})
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var req struct {
			Execute   string          `json:"execute"`
			Arguments json.RawMessage `json:"arguments"`
			ID        any             `json:"id"`
		}
		if json.Unmarshal(sc.Bytes(), &req) != nil {
			return
		}
		if req.Execute == "qmp_capabilities" {
			enc.Encode(map[string]any{"return": map[string]any{}, "id": req.ID})
			continue
		}
		f.mu.Lock()
		f.commands = append(f.commands, req.Execute)
		f.mu.Unlock()
		var r any
		if f.handle != nil {
			r = f.handle(req.Execute, req.Arguments)
		}
		switch r := r.(type) {
		case qmpHangUp:
			return
		case qmpFail:
			enc.Encode(map[string]any{"error": map[string]string{"class": r.class, "desc": r.desc}, "id": req.ID})
		case nil:
			enc.Encode(map[string]any{"return": map[string]any{}, "id": req.ID})
		default:
			enc.Encode(map[string]any{"return": r, "id": req.ID})
		}
	}
}

// got lists the commands received, in order (qmp_capabilities left out).
func (f *fakeMonitor) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.commands...)
}

func (f *fakeMonitor) gotString() string { return strings.Join(f.got(), ",") }

// fakeQEMUBinary makes m start q instead of QEMU: a script that records
// its argv in dir/argv, shows q in the fake /proc with that argv, names
// it in the pidfile QEMU would write, and puts the monitor served at
// dir/qmp.sock where QEMU's QMP socket would be.
func fakeQEMUBinary(t *testing.T, m *Manager, dir string, q *fakeQEMU) {
	t.Helper()
	script := `#!/bin/sh
printf '%s\n' "$@" > 'DIR/argv'
mkdir -p 'PROC'
printf '%s\0' /usr/bin/qemu-system-x86_64 "$@" > 'PROC/cmdline'
echo 'PID (qemu-system-x86) S 1 1 1 0 -1 4194560 0 0' > 'PROC/stat'
pidfile= qmp=
while [ $# -gt 0 ]; do
	case "$1" in
	-pidfile) pidfile=$2 ;;
	-qmp) [ -z "$qmp" ] && qmp=$2 ;;
	esac
	shift
done
qmp=${qmp#unix:path=}
qmp=${qmp%%,server=*}
ln -sf 'DIR/qmp.sock' "$qmp"
echo PID > "$pidfile"
`
	r := strings.NewReplacer("DIR", dir, "PROC", q.proc, "PID", strconv.Itoa(q.pid))
	bin := filepath.Join(dir, "qemu-system-x86_64")
	if err := os.WriteFile(bin, []byte(r.Replace(script)), 0o755); err != nil {
		t.Fatal(err)
	}
	m.opts.QEMU = bin
}

// launchedArgv is the argv the stand-in binary was started with.
func launchedArgv(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "argv"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}
