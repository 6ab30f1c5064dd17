package vm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// fakeProc writes /proc/<pid>/{cmdline,stat} under root. An empty argv
// writes an empty cmdline (kernel thread, zombie).
func fakeProc(t *testing.T, root string, pid int, state string, argv ...string) {
	t.Helper()
	comm := "proc"
	if len(argv) > 0 {
		comm = filepath.Base(argv[0])
	}
	fakeProcStat(t, root, pid, strconv.Itoa(pid)+" ("+comm+") "+state+" 1 1 1 0 -1 4194560 0 0\n", argv...)
}

func fakeProcStat(t *testing.T, root string, pid int, stat string, argv ...string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var cmdline string
	if len(argv) > 0 {
		cmdline = strings.Join(argv, "\x00") + "\x00"
	}
	if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(cmdline), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	// a fake /proc is of one network namespace (ours, "self", too) unless
	// a test moves a process (fakeNetns)
	fakeNetns(t, root, strconv.Itoa(pid), testNetns)
	if _, err := os.Lstat(filepath.Join(root, "self", "ns", "net")); err != nil {
		fakeNetns(t, root, "self", testNetns)
	}
}

// testNetns is the network namespace of a fake /proc's processes.
const testNetns = "net:[4026531840]"

// fakeNetns puts process pid ("self": virt) of the fake /proc at root in
// network namespace id (its ns/net link).
func fakeNetns(t *testing.T, root, pid, id string) {
	t.Helper()
	dir := filepath.Join(root, pid, "ns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "net"))
	if err := os.Symlink(id, filepath.Join(dir, "net")); err != nil {
		t.Fatal(err)
	}
}

func qemuArgv(uid string, extra ...string) []string {
	return append([]string{"/usr/bin/qemu-system-x86_64", "-name", "guest=x", "-uuid", uid}, extra...)
}

func TestProcOwns(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const other = "00000000-0000-0000-0000-000000000001"
	fakeProc(t, root, 100, "S", qemuArgv(testUID)...)
	fakeProc(t, root, 101, "R", append(qemuArgv(strings.ToUpper(testUID)), "-daemonize")...)
	fakeProc(t, root, 102, "S", "/usr/sbin/sshd", "-D", "-uuid", testUID)          // a reused PID
	fakeProc(t, root, 103, "Z", qemuArgv(testUID)...)                              // zombie with a cmdline
	fakeProc(t, root, 104, "Z")                                                    // zombie
	fakeProc(t, root, 105, "S", qemuArgv(other)...)                                // another VM
	fakeProc(t, root, 106, "S", "/usr/bin/qemu-system-x86_64", "-name", "guest=x") // no -uuid
	fakeProc(t, root, 107, "S", "/usr/bin/qemu-system-x86_64", "-name", "-uuid")   // -uuid without value
	fakeProc(t, root, 108, "T", "qemu-kvm", "-uuid", testUID)                      // stopped, still ours
	fakeProc(t, root, 109, "X", qemuArgv(testUID)...)                              // dead
	fakeProc(t, root, 110, "S", "/usr/bin/qemu-img", "info", "-uuid", testUID)     // not a system emulator
	fakeProc(t, root, 111, "S", "/opt/qemu-system-aarch64", "-uuid", testUID)      // other arch
	fakeProc(t, root, 112, "S", "/usr/bin/python3", "qemu-system-x86_64", "-uuid", testUID)
	fakeProcStat(t, root, 113, "garbage", qemuArgv(testUID)...) // unreadable state
	tests := []struct {
		pid  int
		want bool
	}{
		{100, true}, {101, true}, {102, false}, {103, false}, {104, false}, {105, false}, {106, false},
		{107, false}, {108, true}, {109, false}, {110, false}, {111, true}, {112, false}, {113, false},
		{999, false}, {0, false}, {-1, false},
	}
	p := procFS{root: root}
	for _, tt := range tests {
		if got := p.owns(tt.pid, testUID); got != tt.want {
			t.Errorf("owns(%d, %s): got %v; want %v", tt.pid, testUID, got, tt.want)
		}
	}
}

// TestLivePID: a pidfile naming a PID that now runs something else must
// not make the VM look alive; a live QEMU carrying the UID is found even
// when its pidfile is gone or stale, and the pidfile is repaired.
func TestLivePID(t *testing.T) {
	t.Parallel()
	const other = "00000000-0000-0000-0000-000000000001"
	m, _, host := newTestManager(t)
	proc := filepath.Join(host, "proc")
	fakeProc(t, proc, 200, "S", "/bin/bash")
	fakeProc(t, proc, 201, "S", qemuArgv(other)...)
	fakeProc(t, proc, 202, "Z", qemuArgv(testUID)...)
	pidfile := m.runPath(testUID, pidFileName)
	if err := os.MkdirAll(filepath.Dir(pidfile), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"200\n", "201\n", "202\n", "203\n", "", "-200\n", "abc\n"} {
		if err := os.WriteFile(pidfile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := m.livePID(testUID); got != 0 {
			t.Errorf("livePID with pidfile %q: got %d; want 0", content, got)
		}
	}
	os.Remove(pidfile)
	if got := m.livePID(testUID); got != 0 {
		t.Errorf("livePID without pidfile: got %d; want 0", got)
	}

	fakeProc(t, proc, 204, "S", qemuArgv(strings.ToUpper(testUID))...)
	for _, content := range []string{"204\n", " 204 ", "200\n", ""} {
		if err := os.WriteFile(pidfile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := m.livePID(testUID); got != 204 {
			t.Errorf("livePID with pidfile %q and QEMU 204 alive: got %d; want 204", content, got)
		}
		if pid, err := readPIDFile(pidfile); err != nil || pid != 204 {
			t.Errorf("pidfile after livePID: got %d, %v; want 204", pid, err)
		}
	}
}

// TestLivePIDNoRepairWhileLocked: while the VM's lock is held (a start
// whose QEMU is daemonizing) a reader finding the QEMU by its UID does not
// write the pidfile; once the lock is free it does.
func TestLivePIDNoRepairWhileLocked(t *testing.T) {
	t.Parallel()
	m, _, host := newTestManager(t)
	fakeProc(t, filepath.Join(host, "proc"), 204, "S", qemuArgv(testUID)...)
	pidfile := m.runPath(testUID, pidFileName)
	if err := os.MkdirAll(filepath.Dir(pidfile), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := m.store.lockVM(context.Background(), testUID)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.livePID(testUID); got != 204 {
		t.Errorf("livePID while locked: got %d; want 204", got)
	}
	if _, err := os.Stat(pidfile); !os.IsNotExist(err) {
		t.Errorf("pidfile while the vm is locked: %v; want none written", err)
	}
	l.Release()
	if got := m.livePID(testUID); got != 204 {
		t.Errorf("livePID: got %d; want 204", got)
	}
	if pid, err := readPIDFile(pidfile); err != nil || pid != 204 {
		t.Errorf("pidfile once unlocked: got %d, %v; want 204", pid, err)
	}
}

func TestProcState(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tests := []struct {
		stat    string
		want    string
		wantErr bool
	}{
		{"1 (qemu-system-x86) S 0 1 1", "S", false},
		{"1 (my proc) R 0 1 1", "R", false},
		{"1 (a) b) Z 0 1 1", "Z", false},
		{"1 (x) S (y) T 0 1 1", "T", false},
		{"1 ()) D 0", "D", false},
		{"1 (() I 0", "I", false},
		{"1 (qemu) t", "t", false},
		{"1 (no close paren S 0", "", true},
		{"1 (x)", "", true},
		{"1 (x) ", "", true},
		{"", "", true},
	}
	for i, tt := range tests {
		pid := 1000 + i
		fakeProcStat(t, root, pid, tt.stat)
		got, err := procFS{root: root}.state(pid)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("state(%q): got %q, %v; want %q, error %v", tt.stat, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := (procFS{root: root}).state(99999); err == nil {
		t.Errorf("state of a missing pid: got nil error; want one")
	}
}

func TestProcCmdline(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fakeProc(t, root, 1, "S", "/usr/bin/qemu-system-x86_64", "-append", "a b", "", "-name", "x")
	fakeProc(t, root, 2, "S")
	p := procFS{root: root}
	got, err := p.cmdline(1)
	want := []string{"/usr/bin/qemu-system-x86_64", "-append", "a b", "", "-name", "x"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("cmdline(1): got %q, %v; want %q", got, err, want)
	}
	if got, err := p.cmdline(2); err != nil || got != nil {
		t.Errorf("cmdline(2): got %q, %v; want nil, nil", got, err)
	}
	if _, err := p.cmdline(3); err == nil {
		t.Errorf("cmdline(3): got nil error; want one")
	}
}

func TestScanQEMU(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fakeProc(t, root, 10, "S", qemuArgv(testUID)...)
	fakeProc(t, root, 11, "S", "/usr/bin/qemu-kvm", "-uuid", "u2")
	fakeProc(t, root, 12, "T", "qemu-system-aarch64", "-uuid", "u3")
	fakeProc(t, root, 13, "Z", qemuArgv("u4")...)
	fakeProc(t, root, 14, "S", "/bin/bash", "-c", "qemu-system-x86_64 -uuid u5")
	fakeProc(t, root, 15, "S")
	fakeProc(t, root, 16, "S", "/usr/bin/qemu-img", "convert")
	fakeProcStat(t, root, 17, "bad", qemuArgv("u6")...)
	for _, d := range []string{"self", "sys", "net"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "18"), nil, 0o644); err != nil { // not a directory
		t.Fatal(err)
	}
	got := procFS{root: root}.scanQEMU()
	var pids []int
	for _, p := range got {
		pids = append(pids, p.PID)
		if len(p.Argv) == 0 || !isQEMU(p.Argv[0]) {
			t.Errorf("pid %d: got argv %q; want a QEMU argv", p.PID, p.Argv)
		}
	}
	sort.Ints(pids)
	if want := []int{10, 11, 12}; !reflect.DeepEqual(pids, want) {
		t.Errorf("scanQEMU: got pids %v; want %v", pids, want)
	}
	if got := (procFS{root: filepath.Join(root, "missing")}).scanQEMU(); got != nil {
		t.Errorf("scanQEMU of a missing root: got %v; want nil", got)
	}
}

func TestIsQEMU(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		"/usr/bin/qemu-system-x86_64": true, "qemu-system-x86_64": true, "/usr/libexec/qemu-kvm": true,
		"qemu-system-": true, "/usr/bin/qemu-img": false, "/usr/bin/qemu-x86_64": false,
		"/opt/qemu-system-x86_64/bin/python": false, "": false, "kvm": false,
	}
	for in, want := range tests {
		if got := isQEMU(in); got != want {
			t.Errorf("isQEMU(%q): got %v; want %v", in, got, want)
		}
	}
}

func TestProcGone(t *testing.T) {
	t.Parallel()
	uid := "11111111-2222-4333-8444-555555555555"
	root := t.TempDir()
	write := func(pid int, argv []string, state string) {
		dir := filepath.Join(root, strconv.Itoa(pid))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(argv, "\x00")), 0o644)
		os.WriteFile(filepath.Join(dir, "stat"), []byte(fmt.Sprintf("%d (qemu) %s 1 2 3", pid, state)), 0o644)
	}
	write(10, []string{"/usr/bin/qemu-system-x86_64", "-uuid", uid}, "S")
	write(11, nil, "R")                           // tearing down: no cmdline yet alive
	write(12, nil, "Z")                           // zombie
	write(13, []string{"/bin/sleep", "100"}, "S") // PID reused
	// a zombie leader whose threads are still exiting, and one alone
	write(15, nil, "Z")
	write(16, nil, "Z")
	for _, task := range []string{"15/task/15", "15/task/17", "16/task/16"} {
		os.MkdirAll(filepath.Join(root, task), 0o755)
	}
	p := procFS{root: root}
	tests := []struct {
		pid  int
		want bool
	}{{10, false}, {11, false}, {12, true}, {13, true}, {14, true}, {15, false}, {16, true}}
	for _, tc := range tests {
		if got := p.gone(tc.pid, uid); got != tc.want {
			t.Errorf("gone(%d) = %t; want %t", tc.pid, got, tc.want)
		}
	}
}

// QEMU's -daemonize parent lives on, with the child's command line, until
// the child is ready: one VM, not two.
func TestScanQEMUSkipsDaemonizeParent(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	argv := qemuArgv(testUID)
	fakeProcStat(t, root, 500, "500 (qemu-system-x86) S 77 1 1 0 -1 0 0 0\n", argv...)
	fakeProcStat(t, root, 501, "501 (qemu-system-x86) S 500 1 1 0 -1 0 0 0\n", argv...)
	fakeProcStat(t, root, 600, "600 (qemu-system-x86) S 1 1 1 0 -1 0 0 0\n", qemuArgv("00000000-0000-4000-8000-000000000009")...)
	// a QEMU that started another, different one is not its daemonize parent
	fakeProcStat(t, root, 601, "601 (qemu-system-x86) S 600 1 1 0 -1 0 0 0\n", qemuArgv("00000000-0000-4000-8000-00000000000a")...)
	got := procFS{root: root}.scanQEMU()
	var pids []int
	for _, p := range got {
		pids = append(pids, p.PID)
	}
	sort.Ints(pids)
	if len(pids) != 3 || pids[0] != 501 || pids[1] != 600 || pids[2] != 601 {
		t.Errorf("scanQEMU: got pids %v; want [501 600 601] (only the daemonizing parent 500 left out)", pids)
	}
}
