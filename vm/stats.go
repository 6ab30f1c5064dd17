package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/qmp"
)

// Stats is one VM's live resource use, as `virt vm stats` shows it.
// Whatever could not be read stays unknown: CPUKnown false, RSSBytes 0,
// a disk or NIC with Known false; a stopped VM has only its phase.
type Stats struct {
	UID   string    `json:"uid" yaml:"uid"`
	Name  string    `json:"name" yaml:"name"`
	Phase string    `json:"phase" yaml:"phase"`
	At    time.Time `json:"at" yaml:"at"` // when the sample ended
	// CPUPercent is the QEMU process's CPU use (all its threads) over the
	// sampling window, 100 per fully used host core; CPUKnown says
	// whether there was a window (two reads of /proc/PID/stat).
	CPUPercent float64 `json:"cpuPercent" yaml:"cpuPercent"`
	CPUKnown   bool    `json:"cpuKnown" yaml:"cpuKnown"`
	// CPUResolutionPercent is what one clock tick (1/USER_HZ s of CPU
	// time, the kernel's unit) is over the window: CPU figures move in
	// steps of it (4 in a one-shot's 250 ms, 1 in 1 s); 0 when unknown.
	CPUResolutionPercent float64 `json:"cpuResolutionPercent" yaml:"cpuResolutionPercent"`
	// VCPUs are the vCPU threads' shares of CPUPercent ("CPU n/TCG" or
	// "CPU n/KVM" threads, QEMU's -name debug-threads=on), by vCPU index;
	// empty when unknown. A thread never shows more than its process: the
	// two are read a moment apart, a tick's difference at most, so a
	// thread's figure is capped at the process's.
	VCPUs []VCPUStats `json:"vcpus,omitempty" yaml:"vcpus,omitempty"`
	// RSSBytes is the QEMU process's resident memory (VmRSS); 0 unknown.
	RSSBytes int64 `json:"rssBytes" yaml:"rssBytes"`
	// BalloonBytes is the memory the balloon leaves the guest (QMP
	// query-balloon, asked only when QEMU has a virtio-balloon device); 0: no
	// balloon (virtcon adds none).
	BalloonBytes int64       `json:"balloonBytes" yaml:"balloonBytes"`
	Disks        []DiskStats `json:"disks" yaml:"disks"`
	NICs         []NICStats  `json:"nics" yaml:"nics"`
	// Message says why something is unknown, when it is not obvious
	// (the VM's QMP did not answer).
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
}

// VCPUStats is one vCPU thread's CPU use.
type VCPUStats struct {
	Index      int     `json:"index" yaml:"index"`
	TID        int     `json:"tid" yaml:"tid"`
	CPUPercent float64 `json:"cpuPercent" yaml:"cpuPercent"`
}

// DiskStats are one block device's counters since QEMU started (QMP
// query-blockstats), by the spec's disk name ("cdrom", "seed" for those).
type DiskStats struct {
	Name       string `json:"name" yaml:"name"`
	Known      bool   `json:"known" yaml:"known"`
	ReadBytes  int64  `json:"readBytes" yaml:"readBytes"`
	WriteBytes int64  `json:"writeBytes" yaml:"writeBytes"`
	ReadOps    int64  `json:"readOps" yaml:"readOps"`
	WriteOps   int64  `json:"writeOps" yaml:"writeOps"`
}

// NICStats are one NIC's counters from the guest's side (a TAP's rx is
// the guest's tx, as virsh domifstat reports them), read from the TAP's
// /sys/class/net/<tap>/statistics. The user-mode NIC has no TAP: Known
// false.
type NICStats struct {
	Index     int    `json:"index" yaml:"index"`
	MAC       string `json:"mac" yaml:"mac"`
	TAP       string `json:"tap,omitempty" yaml:"tap,omitempty"`
	Known     bool   `json:"known" yaml:"known"`
	RxBytes   int64  `json:"rxBytes" yaml:"rxBytes"`
	TxBytes   int64  `json:"txBytes" yaml:"txBytes"`
	RxPackets int64  `json:"rxPackets" yaml:"rxPackets"`
	TxPackets int64  `json:"txPackets" yaml:"txPackets"`
}

// StatsInterval is the sampling window of a one-shot Stats: CPU % needs
// two reads of the process's CPU time. The QMP and /sys reads happen
// inside the window, so a one-shot costs about this much wall time.
const StatsInterval = 250 * time.Millisecond

// statsParallel bounds how many VMs are read at once: most of a VM's
// time is spent waiting for its QEMU's QMP replies, so many at once.
const statsParallel = 64

// userHZ is the unit of /proc's utime and stime: USER_HZ, 100 on every
// Linux ABI Go runs on (sysconf(_SC_CLK_TCK) is not in the standard
// library; procps assumes the same when it cannot ask).
const userHZ = 100

// Stats samples the VMs named by refs (names or UIDs; empty: every VM of
// ours) over StatsInterval: the QEMU process's CPU time is read, then the
// memory, disk and NIC counters, then the CPU time again once the window
// has passed. VMs are read in parallel. A ref that names no VM is an
// error and nothing is returned.
func (m *Manager) Stats(ctx context.Context, refs []string) ([]Stats, error) {
	s := m.NewStatsSampler()
	if _, err := s.Sample(ctx, refs); err != nil {
		return nil, err
	}
	wait := StatsInterval - time.Since(s.started)
	if wait > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	return s.sampleCPU(ctx)
}

// StatsSampler keeps each VM's previous CPU reading, so that a refreshing
// view (`virt vm stats --watch`, the DCUI) gets CPU % over the time since
// its last sample without waiting: the first Sample has CPUKnown false.
type StatsSampler struct {
	m    *Manager
	mu   sync.Mutex
	prev map[string]cpuSample // uid → last reading
	// when the last Sample began: its CPU readings come first
	started time.Time
	// the last Sample's results, which sampleCPU completes
	pending []Stats
	pids    []int
}

// NewStatsSampler returns a sampler with no previous readings.
func (m *Manager) NewStatsSampler() *StatsSampler {
	return &StatsSampler{m: m, prev: map[string]cpuSample{}}
}

// Sample reads the VMs named by refs (empty: all of ours), CPU % over the
// time since this sampler last read each.
func (s *StatsSampler) Sample(ctx context.Context, refs []string) ([]Stats, error) {
	vms, err := s.m.statsTargets(refs)
	if err != nil {
		return nil, err
	}
	out := make([]Stats, len(vms))
	pids := make([]int, len(vms))
	started := time.Now()
	sem := make(chan struct{}, statsParallel)
	var wg sync.WaitGroup
	for i, v := range vms {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// the CPU time first, so that a one-shot's window holds
			// the QMP and /sys reads
			pids[i] = s.m.livePID(v.Metadata.UID)
			out[i].UID = v.Metadata.UID
			s.cpu(&out[i], pids[i])
			cpu := out[i]
			out[i] = s.m.statsOf(ctx, v, pids[i])
			out[i].CPUPercent, out[i].CPUKnown, out[i].VCPUs = cpu.CPUPercent, cpu.CPUKnown, cpu.VCPUs
		}()
	}
	wg.Wait()
	s.mu.Lock()
	s.started = started
	s.pending, s.pids = out, pids
	s.mu.Unlock()
	return out, nil
}

// sampleCPU reads the CPU time of the last Sample's VMs again: their CPU
// % over the window since then.
func (s *StatsSampler) sampleCPU(ctx context.Context) ([]Stats, error) {
	s.mu.Lock()
	out, pids := s.pending, s.pids
	s.mu.Unlock()
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.cpu(&out[i], pids[i])
		}()
	}
	wg.Wait()
	return out, ctx.Err()
}

// cpu reads the process's CPU time and, against the previous reading of
// the same process, sets st's CPU %.
func (s *StatsSampler) cpu(st *Stats, pid int) {
	if pid <= 0 {
		return
	}
	cur, err := s.m.proc.cpuSample(pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	prev, ok := s.prev[st.UID]
	s.prev[st.UID] = cur
	s.mu.Unlock()
	st.At = cur.at
	if !ok || prev.pid != pid || prev.start != cur.start {
		return // no window yet, or another process since
	}
	pct, ok := cpuPercent(prev.total, cur.total, cur.at.Sub(prev.at))
	if !ok {
		return
	}
	st.CPUPercent, st.CPUKnown = pct, true
	st.CPUResolutionPercent, _ = cpuPercent(0, 1, cur.at.Sub(prev.at))
	st.VCPUs = vcpuShares(prev, cur, pct)
}

// vcpuShares are the vCPU threads' CPU % between two readings of one
// process whose own was pct, each at most pct: a thread's ticks are read
// after the process's, so a thread can count a tick its process's reading
// did not have yet (8 % against 4 % in a 250 ms window).
func vcpuShares(prev, cur cpuSample, pct float64) []VCPUStats {
	var out []VCPUStats
	for idx, t := range cur.vcpus {
		p, ok := prev.vcpus[idx]
		if !ok || p.tid != t.tid {
			continue
		}
		if v, ok := cpuPercent(p.ticks, t.ticks, cur.at.Sub(prev.at)); ok {
			out = append(out, VCPUStats{Index: idx, TID: t.tid, CPUPercent: min(v, pct)})
		}
	}
	sortVCPUs(out)
	return out
}

func sortVCPUs(v []VCPUStats) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j].Index < v[j-1].Index; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// cpuPercent is the CPU use between two readings of utime+stime (in
// USER_HZ ticks) taken elapsed apart: 100 per fully used core. A window
// of nothing, or a counter that went back, is no answer.
func cpuPercent(before, after uint64, elapsed time.Duration) (float64, bool) {
	if elapsed <= 0 || after < before {
		return 0, false
	}
	used := float64(after-before) / userHZ
	return used / elapsed.Seconds() * 100, true
}

// statsTargets resolves refs to manifests (empty: all of ours, by name).
func (m *Manager) statsTargets(refs []string) ([]*VirtualMachine, error) {
	if len(refs) == 0 {
		vms, errs := m.store.list()
		if vms == nil && len(errs) > 0 {
			return nil, fmt.Errorf("vm stats: %w", errors.Join(errs...))
		}
		sortByName(vms)
		return vms, nil
	}
	var out []*VirtualMachine
	seen := map[string]bool{}
	for _, r := range refs {
		v, err := m.find(r)
		if err != nil {
			return nil, fmt.Errorf("vm stats: %w", err)
		}
		if !seen[v.Metadata.UID] {
			seen[v.Metadata.UID] = true
			out = append(out, v)
		}
	}
	return out, nil
}

func sortByName(vms []*VirtualMachine) {
	for i := 1; i < len(vms); i++ {
		for j := i; j > 0 && vms[j].Metadata.Name < vms[j-1].Metadata.Name; j-- {
			vms[j], vms[j-1] = vms[j-1], vms[j]
		}
	}
}

// statsQMPTimeout bounds the QMP part of one VM's sample: a VM that does
// not answer gets unknown disks, not a stuck listing.
const statsQMPTimeout = time.Second

// statsOf reads one VM's memory, disks and NICs (not its CPU); pid is
// its QEMU's (0: not running).
func (m *Manager) statsOf(ctx context.Context, v *VirtualMachine, pid int) Stats {
	uid := v.Metadata.UID
	st := Stats{UID: uid, Name: v.Metadata.Name, Phase: PhaseStopped, At: time.Now(), Disks: []DiskStats{}, NICs: []NICStats{}}
	if pid == 0 {
		if m.anySaved(uid) {
			st.Phase = PhaseSaved
		}
		return st
	}
	st.Phase = PhaseRunning
	if rss, err := m.proc.rss(pid); err == nil {
		st.RSSBytes = rss
	}
	// disks first as unknown, by the spec's names; QMP fills them in
	for _, d := range v.Spec.Disks {
		st.Disks = append(st.Disks, DiskStats{Name: d.Name})
	}
	// virtcon adds no balloon: it is asked about only when the command
	// line has one (one QMP round trip less for every other VM)
	argv, _ := m.proc.cmdline(pid)
	balloon := slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, "virtio-balloon") })
	qctx, cancel := context.WithTimeout(ctx, statsQMPTimeout)
	err := m.qmpStats(qctx, uid, &st, balloon)
	cancel()
	if err != nil {
		st.Phase = PhaseUnresponsive
		st.Message = "QMP: " + err.Error()
	}
	if len(v.Spec.Network) == 0 {
		st.NICs = append(st.NICs, NICStats{Index: 0, MAC: MACFor(uid, 0)}) // user-mode: no counters
	}
	for i, n := range v.Spec.Network {
		mac := n.MAC
		if mac == "" {
			mac = MACFor(uid, i)
		}
		tap := m.opts.Net.TAPName(uid, i)
		ns := NICStats{Index: i, MAC: mac, TAP: tap}
		if c, err := readTAPCounters(filepath.Join(m.opts.HostRoot, "sys/class/net", tap, "statistics")); err == nil {
			// the TAP's receive is what the guest sent
			ns.Known = true
			ns.RxBytes, ns.TxBytes, ns.RxPackets, ns.TxPackets = c.txBytes, c.rxBytes, c.txPackets, c.rxPackets
		}
		st.NICs = append(st.NICs, ns)
	}
	return st
}

// qmpStats fills in the phase, the disks' counters and the balloon.
func (m *Manager) qmpStats(ctx context.Context, uid string, st *Stats, balloon bool) error {
	mon, err := m.dialQMP(ctx, uid)
	if err != nil {
		return err
	}
	defer mon.Close()
	// both commands at once (the monitor matches replies by id): QEMU
	// reads them in one wakeup, which counts on a loaded host
	var (
		s       qmp.StatusInfo
		sErr    error
		blk     []blockStats
		gotStat = make(chan struct{})
	)
	go func() {
		defer close(gotStat)
		s, sErr = mon.Status(ctx)
	}()
	bErr := mon.Execute(ctx, "query-blockstats", nil, &blk)
	<-gotStat
	if sErr != nil {
		return sErr
	}
	if bErr != nil {
		return bErr
	}
	st.Phase = phaseFromQMP(s.Status)
	applyBlockStats(st, blk)
	if !balloon {
		return nil
	}
	var bal struct {
		Actual int64 `json:"actual"`
	}
	if err := mon.Execute(ctx, "query-balloon", nil, &bal); err == nil {
		st.BalloonBytes = bal.Actual
	} else if ce := (*qmp.CommandError)(nil); !errors.As(err, &ce) {
		return err // the connection failed; "no balloon" is a command error
	}
	return nil
}

// blockStats is one entry of query-blockstats.
type blockStats struct {
	Device string `json:"device"`
	QDev   string `json:"qdev"`
	Node   string `json:"node-name"`
	Stats  struct {
		RdBytes      int64 `json:"rd_bytes"`
		WrBytes      int64 `json:"wr_bytes"`
		RdOperations int64 `json:"rd_operations"`
		WrOperations int64 `json:"wr_operations"`
	} `json:"stats"`
}

// applyBlockStats matches query-blockstats' devices to st's disks by
// their drive ids (DiskDriveID); the CD drive and the seed, and disks
// hot-plugged since the start, are added after the spec's.
func applyBlockStats(st *Stats, blk []blockStats) {
	byDrive := map[string]int{}
	for i, d := range st.Disks {
		byDrive[DiskDriveID(d.Name)] = i
	}
	for _, b := range blk {
		id := b.Device
		if id == "" {
			id = b.Node
		}
		if id == "" {
			continue
		}
		d := DiskStats{Known: true, ReadBytes: b.Stats.RdBytes, WriteBytes: b.Stats.WrBytes, ReadOps: b.Stats.RdOperations, WriteOps: b.Stats.WrOperations}
		i, ok := byDrive[id]
		if !ok {
			// a hot-plugged disk under a linked clone's overlay: its
			// active node is the overlay's, its qdev still its own
			i = slices.IndexFunc(st.Disks, func(x DiskStats) bool { return isDiskBlock(x.Name, b.Device, b.QDev, b.Node) })
			ok = i >= 0
		}
		if ok {
			d.Name = st.Disks[i].Name
			st.Disks[i] = d
			continue
		}
		d.Name = strings.TrimPrefix(id, "disk-")
		st.Disks = append(st.Disks, d)
	}
}

type tapCounters struct{ rxBytes, txBytes, rxPackets, txPackets int64 }

func readTAPCounters(dir string) (tapCounters, error) {
	var c tapCounters
	for _, f := range []struct {
		name string
		v    *int64
	}{{"rx_bytes", &c.rxBytes}, {"tx_bytes", &c.txBytes}, {"rx_packets", &c.rxPackets}, {"tx_packets", &c.txPackets}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return c, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return c, fmt.Errorf("%s/%s: %q: %w", dir, f.name, strings.TrimSpace(string(b)), err)
		}
		*f.v = n
	}
	return c, nil
}

// cpuSample is one reading of a QEMU process's CPU time.
type cpuSample struct {
	pid   int
	start uint64 // starttime: tells a reused PID
	at    time.Time
	total uint64 // utime+stime of all threads, USER_HZ ticks
	vcpus map[int]threadTicks
}

type threadTicks struct {
	tid   int
	ticks uint64
}

// vcpuIndex tells a vCPU thread by its name, "CPU 0/TCG" or "CPU 1/KVM".
func vcpuIndex(comm string) (int, bool) {
	rest, ok := strings.CutPrefix(comm, "CPU ")
	if !ok {
		return 0, false
	}
	n, accel, ok := strings.Cut(rest, "/")
	if !ok || (accel != "TCG" && accel != "KVM") {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i >= 0
}

// cpuSample reads the process's CPU time and its vCPU threads'.
func (p procFS) cpuSample(pid int) (cpuSample, error) {
	dir := filepath.Join(p.root, strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return cpuSample{}, err
	}
	at := p.clock()
	ps, err := proc.ParseStat(string(b))
	if err != nil {
		return cpuSample{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	s := cpuSample{pid: pid, start: ps.Start, at: at, total: ps.UTime + ps.STime, vcpus: map[int]threadTicks{}}
	tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		ts, err := proc.ParseStat(string(b))
		if err != nil {
			continue
		}
		if i, ok := vcpuIndex(ts.Comm); ok {
			s.vcpus[i] = threadTicks{tid: tid, ticks: ts.UTime + ts.STime}
		}
	}
	return s, nil
}

// rss is the process's resident memory from /proc/PID/status (VmRSS, kB).
func (p procFS) rss(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(b)
}

func parseVmRSS(b []byte) (int64, error) {
	for line := range strings.SplitSeq(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status VmRSS %q: want \"N kB\"", strings.TrimSpace(v))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status VmRSS %q: %w", f[0], err)
		}
		return n * 1024, nil
	}
	return 0, errors.New("status: no VmRSS (a kernel thread or a zombie)")
}
