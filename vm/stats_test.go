package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"
)

// statLine is a /proc stat line with the given comm, utime, stime and
// starttime (the rest zeros).
func statLine(pid int, comm string, utime, stime, start int) string {
	f := []any{pid, comm, utime, stime, start}
	return fmtStat(f...)
}

func fmtStat(f ...any) string {
	// pid (comm) S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime prio nice threads itreal starttime vsize rss
	return fmt.Sprintf("%d (%s) S 1 1 1 0 -1 4194560 10 0 0 0 %d %d 0 0 20 0 5 0 %d 1000 100\n", f...)
}

func TestCPUPercent(t *testing.T) {
	tests := []struct {
		name          string
		before, after uint64
		elapsed       time.Duration
		want          float64
		ok            bool
	}{
		{"one core busy", 1000, 1025, 250 * time.Millisecond, 100, true},
		{"idle", 1000, 1000, time.Second, 0, true},
		{"two cores", 0, 400, 2 * time.Second, 200, true},
		{"half a core", 10, 60, time.Second, 50, true},
		{"no window", 5, 6, 0, 0, false},
		{"counter went back", 6, 5, time.Second, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := cpuPercent(tt.before, tt.after, tt.elapsed)
			if ok != tt.ok || math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("cpuPercent(%d, %d, %s) = %v, %v; want %v, %v", tt.before, tt.after, tt.elapsed, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestVCPUIndex(t *testing.T) {
	tests := []struct {
		comm string
		want int
		ok   bool
	}{
		{"CPU 0/TCG", 0, true},
		{"CPU 3/KVM", 3, true},
		{"CPU 1/HVF", 0, false},
		{"qemu-system-x86", 0, false},
		{"CPU x/KVM", 0, false},
		{"worker", 0, false},
	}
	for _, tt := range tests {
		got, ok := vcpuIndex(tt.comm)
		if got != tt.want || ok != tt.ok {
			t.Errorf("vcpuIndex(%q) = %d, %v; want %d, %v", tt.comm, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{"normal", "Name:\tqemu\nVmPeak:\t  900 kB\nVmRSS:\t   123456 kB\nThreads:\t5\n", 123456 * 1024, false},
		{"kernel thread", "Name:\tkthreadd\nThreads:\t1\n", 0, true},
		{"bad unit", "VmRSS:\t12 MB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseVmRSS([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseVmRSS = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestApplyBlockStats(t *testing.T) {
	st := Stats{Disks: []DiskStats{{Name: "root"}, {Name: "data"}, {Name: "logs"}}}
	var blk []blockStats
	add := func(dev string, rd, wr, rops, wops int64) {
		var b blockStats
		b.Device = dev
		b.Stats.RdBytes, b.Stats.WrBytes, b.Stats.RdOperations, b.Stats.WrOperations = rd, wr, rops, wops
		blk = append(blk, b)
	}
	add("disk-root", 100, 200, 3, 4)
	add("cdrom", 5, 0, 1, 0)
	// a disk hot-plugged, then frozen below a linked clone's overlay:
	// known by its qdev, its active node the overlay's
	add("", 7, 8, 1, 2)
	blk[len(blk)-1].QDev, blk[len(blk)-1].Node = "/machine/peripheral/blk-logs/virtio-backend", "ov-0123abcd-2"
	applyBlockStats(&st, blk)
	want := []DiskStats{
		{Name: "root", Known: true, ReadBytes: 100, WriteBytes: 200, ReadOps: 3, WriteOps: 4},
		{Name: "data"}, // not in QMP's answer: unknown
		{Name: "logs", Known: true, ReadBytes: 7, WriteBytes: 8, ReadOps: 1, WriteOps: 2},
		{Name: "cdrom", Known: true, ReadBytes: 5, ReadOps: 1},
	}
	if len(st.Disks) != len(want) {
		t.Fatalf("disks = %+v; want %+v", st.Disks, want)
	}
	for i := range want {
		if st.Disks[i] != want[i] {
			t.Errorf("disk %d = %+v; want %+v", i, st.Disks[i], want[i])
		}
	}
}

// TestCPUSampleThreads reads a fixture /proc: the process total and the
// vCPU threads by their names, other threads left out.
func TestCPUSampleThreads(t *testing.T) {
	root := t.TempDir()
	write := func(rel, s string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("77/stat", statLine(77, "qemu-system-x86", 300, 100, 5000))
	write("77/task/77/stat", statLine(77, "qemu-system-x86", 20, 10, 5000))
	write("77/task/78/stat", statLine(78, "CPU 0/TCG", 200, 50, 5001))
	write("77/task/79/stat", statLine(79, "CPU 1/TCG", 60, 20, 5001))
	write("77/task/80/stat", statLine(80, "worker", 20, 20, 5002))
	s, err := procFS{root: root}.cpuSample(77)
	if err != nil {
		t.Fatal(err)
	}
	if s.total != 400 || s.start != 5000 {
		t.Errorf("total %d start %d; want 400 5000", s.total, s.start)
	}
	want := map[int]threadTicks{0: {tid: 78, ticks: 250}, 1: {tid: 79, ticks: 80}}
	if len(s.vcpus) != len(want) {
		t.Fatalf("vcpus = %+v; want %+v", s.vcpus, want)
	}
	for i, w := range want {
		if s.vcpus[i] != w {
			t.Errorf("vcpu %d = %+v; want %+v", i, s.vcpus[i], w)
		}
	}
	if _, err := (procFS{root: root}).cpuSample(78); err == nil {
		t.Error("cpuSample of a pid without /proc entry: no error")
	}
}

// A vCPU thread never shows more CPU than its whole process: read a
// moment after the process, it can count a tick more (one tick is 4 % in
// a 250 ms window).
func TestVCPUSharesCapped(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	prev := cpuSample{pid: 9, at: at, total: 100, vcpus: map[int]threadTicks{0: {tid: 10, ticks: 50}, 1: {tid: 11, ticks: 40}, 2: {tid: 12, ticks: 1}}}
	cur := cpuSample{pid: 9, at: at.Add(250 * time.Millisecond), total: 101, vcpus: map[int]threadTicks{
		0: {tid: 10, ticks: 52}, // 2 ticks: 8 %, its process 4 %
		1: {tid: 11, ticks: 40}, // idle
		2: {tid: 13, ticks: 9},  // another thread on the index: no window
	}}
	pct, _ := cpuPercent(prev.total, cur.total, cur.at.Sub(prev.at))
	got := vcpuShares(prev, cur, pct)
	want := []VCPUStats{{Index: 0, TID: 10, CPUPercent: 4}, {Index: 1, TID: 11, CPUPercent: 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("vcpuShares = %+v; want %+v (capped at the process's %v %%)", got, want, pct)
	}
	if res, _ := cpuPercent(0, 1, 250*time.Millisecond); res != 4 {
		t.Errorf("one tick over 250 ms = %v %%; want 4", res)
	}
}

// TestSamplerWindow: the first reading of a process has no CPU %, the
// second the use between them; a reused PID (another starttime) starts
// again.
func TestSamplerWindow(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "9"), 0o755); err != nil {
		t.Fatal(err)
	}
	set := func(ticks, start int) {
		if err := os.WriteFile(filepath.Join(root, "9/stat"), []byte(statLine(9, "qemu-system-x86", ticks, 0, start)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	m := &Manager{proc: procFS{root: root, now: clk.now}}
	s := m.NewStatsSampler()
	set(100, 1)
	var st Stats
	st.UID = "u"
	s.cpu(&st, 9)
	if st.CPUKnown {
		t.Fatalf("first reading: CPU known (%v); want unknown", st.CPUPercent)
	}
	clk.advance(50 * time.Millisecond)
	set(105, 1) // 5 ticks = 50 ms of CPU in 50 ms
	s.cpu(&st, 9)
	if !st.CPUKnown || st.CPUPercent < 40 || st.CPUPercent > 110 {
		t.Errorf("second reading: %v known %v; want about 100", st.CPUPercent, st.CPUKnown)
	}
	if r := st.CPUResolutionPercent; r <= 0 || r > 20 || st.CPUPercent/r < 4.5 || st.CPUPercent/r > 5.5 {
		t.Errorf("second reading: resolution %v %%; want one tick over the window of at least 50 ms (%v %% is 5 ticks)", r, st.CPUPercent)
	}
	st = Stats{UID: "u"}
	clk.advance(10 * time.Millisecond)
	set(500, 2) // another process on the PID (more ticks: a window would show)
	s.cpu(&st, 9)
	if st.CPUKnown {
		t.Errorf("reused pid: CPU known (%v); want unknown", st.CPUPercent)
	}
}

// Stats of three VMs against a fake QEMU: the running one's CPU over the
// sampler's window, RSS, QMP's disks and phase, and its TAP's counters
// from the guest's side; a stopped one has only its phase; one whose QMP
// does not answer is Unresponsive, its disks unknown.
func TestStatsFakeQEMU(t *testing.T) {
	m, _, host := newTestManager(t)
	ctx := context.Background()
	web := mustCreate(t, m, kernelVM("web", testKernel(t)))
	mustCreate(t, m, kernelVM("off", testKernel(t)))
	deaf := mustCreate(t, m, kernelVM("deaf", testKernel(t)))
	// a disk and a TAP NIC, straight into the store (no images or
	// bridges here)
	web.Spec.Disks = []Disk{{Name: "root", Size: "1G"}}
	web.Spec.Network = []NIC{{Bridge: "br0", MAC: "52:54:00:aa:bb:cc"}}
	if err := m.store.save(web); err != nil {
		t.Fatal(err)
	}
	uid := web.Metadata.UID
	q := startFakeQEMU(t, m, host, uid, nil)
	startFakeQEMU(t, m, host, deaf.Metadata.UID, nil)
	writeFile := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setTicks := func(n int) {
		writeFile(filepath.Join(q.proc, "stat"), statLine(q.pid, "qemu-system-x86", n, 0, 777))
		writeFile(filepath.Join(q.proc, "task", strconv.Itoa(q.pid+1), "stat"), statLine(q.pid+1, "CPU 0/TCG", n, 0, 778))
	}
	setTicks(100)
	writeFile(filepath.Join(q.proc, "status"), "Name:\tqemu\nVmRSS:\t  204800 kB\n")
	tap := m.opts.Net.TAPName(uid, 0)
	for f, v := range map[string]string{"rx_bytes": "1000", "tx_bytes": "5000", "rx_packets": "10", "tx_packets": "50"} {
		writeFile(filepath.Join(host, "sys/class/net", tap, "statistics", f), v+"\n")
	}
	serveMonitor(t, m.runPath(uid, qmpSockName), &fakeMonitor{handle: func(cmd string, _ json.RawMessage) any {
		switch cmd {
		case "query-status":
			return map[string]any{"status": "paused", "running": false}
		case "query-blockstats":
			return []map[string]any{{"device": "disk-root", "stats": map[string]int{"rd_bytes": 4096, "wr_bytes": 512, "rd_operations": 8, "wr_operations": 1}}}
		}
		return qmpFail{"CommandNotFound", cmd}
	}})

	clk := &fakeClock{t: time.Unix(1e9, 0)}
	m.proc.now = clk.now
	s := m.NewStatsSampler()
	if _, err := s.Sample(ctx, nil); err != nil {
		t.Fatal(err)
	}
	clk.advance(100 * time.Millisecond)
	setTicks(105) // 50 ms of CPU in 100 ms
	st, err := s.Sample(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 3 || st[0].Name != "deaf" || st[1].Name != "off" || st[2].Name != "web" {
		t.Fatalf("stats = %+v; want deaf, off, web", st)
	}
	w := st[2]
	if !w.CPUKnown || w.CPUPercent < 20 || w.CPUPercent > 60 {
		t.Errorf("web CPU %v known %v; want about 50", w.CPUPercent, w.CPUKnown)
	}
	if len(w.VCPUs) != 1 || w.VCPUs[0].Index != 0 || w.VCPUs[0].TID != q.pid+1 {
		t.Errorf("web vCPUs %+v; want CPU 0 on tid %d", w.VCPUs, q.pid+1)
	}
	if w.Phase != PhasePaused || w.RSSBytes != 204800*1024 || w.BalloonBytes != 0 || w.Message != "" {
		t.Errorf("web = %+v; want Paused (QMP's), RSS 200 MiB, no balloon", w)
	}
	if len(w.Disks) != 1 || w.Disks[0] != (DiskStats{Name: "root", Known: true, ReadBytes: 4096, WriteBytes: 512, ReadOps: 8, WriteOps: 1}) {
		t.Errorf("web disks %+v", w.Disks)
	}
	wantNIC := NICStats{Index: 0, MAC: "52:54:00:aa:bb:cc", TAP: tap, Known: true, RxBytes: 5000, TxBytes: 1000, RxPackets: 50, TxPackets: 10}
	if len(w.NICs) != 1 || w.NICs[0] != wantNIC {
		t.Errorf("web NICs %+v; want %+v (the TAP's tx is the guest's rx)", w.NICs, wantNIC)
	}
	if o := st[1]; o.Phase != PhaseStopped || o.CPUKnown || o.RSSBytes != 0 || len(o.Disks) != 0 {
		t.Errorf("stopped VM = %+v; want its phase only", o)
	}
	if d := st[0]; d.Phase != PhaseUnresponsive || d.Message == "" || len(d.NICs) != 1 || d.NICs[0].Known {
		t.Errorf("VM without QMP = %+v; want Unresponsive with a message, its user-mode NIC unknown", d)
	}
	if _, err := m.Stats(ctx, []string{"web", "nosuch"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stats of an unknown VM: %v; want ErrNotFound", err)
	}
}

// fakeClock is the time CPU samples are taken at, moved by the test: a
// window of a busy machine's scheduling would make a wall-clock one any
// length (a 100 ms sleep measured 380 ms under load).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
