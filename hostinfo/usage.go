package hostinfo

import (
	"fmt"
	"strconv"
	"strings"
)

// Usage is one sample of the host's CPU and memory use. The CPU counters
// are cumulative jiffies since boot, so a percentage needs two samples
// (CPUPercentSince); memory is a point-in-time reading.
type Usage struct {
	// CPUBusy and CPUTotal are jiffies from the aggregate "cpu" line of
	// /proc/stat: total is user+nice+system+idle+iowait+irq+softirq+steal
	// (guest time is already inside user and nice), busy is total less
	// idle and iowait.
	CPUBusy, CPUTotal uint64
	// MemTotalBytes and MemAvailableBytes are from /proc/meminfo.
	MemTotalBytes, MemAvailableBytes uint64
}

// SampleUsage reads /proc/stat and /proc/meminfo under root ("/" for the
// live machine). It is cheap (two small reads), meant to be called every
// second. An unreadable or malformed file is an error naming the file.
func SampleUsage(root string) (Usage, error) {
	h := Options{Root: root}.fs()
	var u Usage
	stat, err := h.readString("proc/stat")
	if err != nil {
		return u, fmt.Errorf("cpu usage: %w", err)
	}
	if u.CPUBusy, u.CPUTotal, err = parseProcStat(stat); err != nil {
		return u, fmt.Errorf("cpu usage: %s: %w", h.path("proc/stat"), err)
	}
	mem, err := h.readString("proc/meminfo")
	if err != nil {
		return u, fmt.Errorf("memory usage: %w", err)
	}
	if u.MemTotalBytes, u.MemAvailableBytes, err = parseMemUsage(mem); err != nil {
		return u, fmt.Errorf("memory usage: %s: %w", h.path("proc/meminfo"), err)
	}
	return u, nil
}

// parseProcStat returns busy and total jiffies from the aggregate cpu line.
func parseProcStat(s string) (busy, total uint64, err error) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		// cpu user nice system idle iowait irq softirq steal guest guest_nice;
		// kernels before 2.6.11 stop after steal's predecessors, so 4 is the minimum.
		if len(f) < 5 {
			return 0, 0, fmt.Errorf("aggregate cpu line has %d fields; want at least 4 counters", len(f)-1)
		}
		var v [8]uint64
		for i := 0; i < len(v) && i+1 < len(f); i++ {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("aggregate cpu line: field %d: not a counter: %q", i+1, f[i+1])
			}
			v[i] = n
		}
		for _, n := range v {
			total += n
		}
		idle := v[3] + v[4]
		return total - idle, total, nil
	}
	return 0, 0, fmt.Errorf("no aggregate cpu line")
}

// parseMemUsage returns MemTotal and MemAvailable in bytes.
func parseMemUsage(s string) (total, avail uint64, err error) {
	var haveTotal, haveAvail bool
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "MemTotal" && k != "MemAvailable") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, 0, fmt.Errorf("%s: no value", k)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: not a number: %q", k, f[0])
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		if k == "MemTotal" {
			total, haveTotal = n, true
		} else {
			avail, haveAvail = n, true
		}
	}
	switch {
	case !haveTotal:
		return 0, 0, fmt.Errorf("no MemTotal")
	case !haveAvail:
		// MemAvailable exists since Linux 3.14; without it we would guess.
		return 0, 0, fmt.Errorf("no MemAvailable")
	case total == 0:
		return 0, 0, fmt.Errorf("MemTotal is 0")
	}
	return total, avail, nil
}

// CPUPercentSince is the share of CPU time spent busy between prev and u,
// 0-100. It is 0 when no time passed (or the counters went backwards, as
// after a reboot between samples).
func (u Usage) CPUPercentSince(prev Usage) float64 {
	if u.CPUTotal <= prev.CPUTotal {
		return 0
	}
	dt := float64(u.CPUTotal - prev.CPUTotal)
	// iowait may go backwards on some kernels, so busy can shrink a little.
	if u.CPUBusy <= prev.CPUBusy {
		return 0
	}
	return min(100, 100*float64(u.CPUBusy-prev.CPUBusy)/dt)
}

// MemPercent is the share of memory in use (not available), 0-100.
func (u Usage) MemPercent() float64 {
	if u.MemTotalBytes == 0 {
		return 0
	}
	if u.MemAvailableBytes >= u.MemTotalBytes {
		return 0
	}
	return 100 * float64(u.MemTotalBytes-u.MemAvailableBytes) / float64(u.MemTotalBytes)
}
