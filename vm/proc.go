package vm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procFS reads processes under a /proc root (a fixture in tests).
type procFS struct {
	root string
	// now reads the clock a CPU sample is taken at (nil: time.Now); a
	// test's fake /proc comes with a fake clock
	now func() time.Time
}

func (p procFS) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

func (p procFS) cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil // kernel thread or zombie
	}
	return strings.Split(string(b), "\x00"), nil
}

// state returns the one-letter process state (R, S, T, Z, ...).
func (p procFS) state(pid int) (string, error) {
	st, _, err := p.stat(pid)
	return st, err
}

// stat returns the process state and the parent's PID (0 when the stat
// line has none, as in older fixtures).
func (p procFS) stat(pid int) (state string, ppid int, err error) {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, err
	}
	// pid (comm) S ppid ...: comm may hold spaces and parens; the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return "", 0, fmt.Errorf("malformed stat for pid %d", pid)
	}
	if f := strings.Fields(string(b[i+2:])); len(f) > 1 {
		ppid, _ = strconv.Atoi(f[1])
	}
	return string(b[i+2]), ppid, nil
}

// openFiles lists the files pid holds open (its /proc/PID/fd links; a
// deleted file by the name it had).
func (p procFS) openFiles(pid int) []string {
	dir := filepath.Join(p.root, strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(t, "/") {
			continue // sockets, pipes, anon inodes
		}
		out = append(out, strings.TrimSuffix(t, " (deleted)"))
	}
	return out
}

// argValue returns the argument following flag in argv.
func argValue(argv []string, flag string) (string, bool) {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == flag {
			return argv[i+1], true
		}
	}
	return "", false
}

// owns reports whether pid is a live (non-zombie) QEMU carrying our UUID:
// a pidfile alone is never trusted, since PIDs are reused.
func (p procFS) owns(pid int, uid string) bool {
	if pid <= 0 {
		return false
	}
	argv, err := p.cmdline(pid)
	if err != nil || len(argv) == 0 {
		return false
	}
	if !isQEMU(argv[0]) {
		return false
	}
	if v, ok := argValue(argv, "-uuid"); !ok || !strings.EqualFold(v, uid) {
		return false
	}
	st, err := p.state(pid)
	return err == nil && st != "Z" && st != "X"
}

// gone reports whether pid no longer is our QEMU: it has exited (no
// /proc entry, or a zombie), or the PID now belongs to another program.
// A process that is still tearing down (its memory, and so its cmdline,
// already released) is not gone yet: it may still hold its sockets. Nor
// is a zombie leader whose other threads are still exiting (exit_group
// makes the leader a zombie first): its files are still open, and a
// systemd that stops its scope then finds it there.
func (p procFS) gone(pid int, uid string) bool {
	st, err := p.state(pid)
	if err != nil || st == "X" {
		return true
	}
	if st == "Z" {
		tasks, err := os.ReadDir(filepath.Join(p.root, strconv.Itoa(pid), "task"))
		return err != nil || len(tasks) <= 1
	}
	argv, err := p.cmdline(pid)
	if err != nil {
		return true
	}
	if len(argv) == 0 {
		return false
	}
	v, ok := argValue(argv, "-uuid")
	return !isQEMU(argv[0]) || !ok || !strings.EqualFold(v, uid)
}

func isQEMU(argv0 string) bool {
	b := filepath.Base(argv0)
	return strings.HasPrefix(b, "qemu-system-") || b == "qemu-kvm"
}

func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pidfile %s: bad content %q", path, strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// qemuProcess is a QEMU process found in /proc.
type qemuProcess struct {
	PID  int
	PPID int
	Argv []string
}

// scanQEMU lists every live QEMU process. QEMU's -daemonize forks: until
// the child reports it is ready, its parent lives on with the same
// command line. That parent is not a second VM and is left out.
func (p procFS) scanQEMU() []qemuProcess {
	all := p.scanAllQEMU()
	pids := map[int]bool{}
	for _, q := range all {
		pids[q.PID] = true
	}
	argv := map[int]string{}
	for _, q := range all {
		argv[q.PID] = strings.Join(q.Argv, "\x00")
	}
	parent := map[int]bool{}
	for _, q := range all {
		// the -daemonize case: the child carries its parent's command line
		if pids[q.PPID] && argv[q.PPID] == argv[q.PID] {
			parent[q.PPID] = true
		}
	}
	out := all[:0]
	for _, q := range all {
		if !parent[q.PID] {
			out = append(out, q)
		}
	}
	return out
}

func (p procFS) scanAllQEMU() []qemuProcess {
	ents, err := os.ReadDir(p.root)
	if err != nil {
		return nil
	}
	var out []qemuProcess
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv, err := p.cmdline(pid)
		if err != nil || len(argv) == 0 || !isQEMU(argv[0]) {
			continue
		}
		st, ppid, err := p.stat(pid)
		if err != nil || st == "Z" {
			continue
		}
		out = append(out, qemuProcess{PID: pid, PPID: ppid, Argv: argv})
	}
	return out
}
