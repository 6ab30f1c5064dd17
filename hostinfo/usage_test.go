package hostinfo

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	statFixture = `cpu  1000 20 300 8000 500 40 60 80 200 0
cpu0 500 10 150 4000 250 20 30 40 100 0
cpu1 500 10 150 4000 250 20 30 40 100 0
intr 12345 0 0
ctxt 99999
btime 1700000000
`
	meminfoFixture = `MemTotal:       16384000 kB
MemFree:         1024000 kB
MemAvailable:    4096000 kB
Buffers:          100000 kB
`
)

func writeProc(t *testing.T, stat, meminfo string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "proc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{"stat": stat, "meminfo": meminfo} {
		if s == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestSampleUsage(t *testing.T) {
	t.Parallel()
	u, err := SampleUsage(writeProc(t, statFixture, meminfoFixture))
	if err != nil {
		t.Fatal(err)
	}
	// total = 1000+20+300+8000+500+40+60+80 (guest is inside user); idle = 8000+500
	want := Usage{CPUBusy: 1500, CPUTotal: 10000, MemTotalBytes: 16384000 * 1024, MemAvailableBytes: 4096000 * 1024}
	if u != want {
		t.Errorf("SampleUsage = %+v; want %+v", u, want)
	}
	if got := u.MemPercent(); math.Abs(got-75) > 1e-9 {
		t.Errorf("MemPercent = %v; want 75", got)
	}
}

func TestSampleUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		stat, meminfo string
		wantFile      string
		wantText      string
	}{
		{"no stat", "", meminfoFixture, "proc/stat", "no such file"},
		{"no meminfo", statFixture, "", "proc/meminfo", "no such file"},
		{"garbage stat", "hello world\n", meminfoFixture, "proc/stat", "no aggregate cpu line"},
		{"short cpu line", "cpu 1 2 3\n", meminfoFixture, "proc/stat", "at least 4"},
		{"non-numeric counter", "cpu 1 2 x 4 5\n", meminfoFixture, "proc/stat", `"x"`},
		{"garbage meminfo", statFixture, "¯\\_(ツ)_/¯\n", "proc/meminfo", "no MemTotal"},
		{"no MemAvailable", statFixture, "MemTotal: 100 kB\n", "proc/meminfo", "no MemAvailable"},
		{"bad MemTotal", statFixture, "MemTotal: lots kB\nMemAvailable: 1 kB\n", "proc/meminfo", `"lots"`},
		{"zero MemTotal", statFixture, "MemTotal: 0 kB\nMemAvailable: 0 kB\n", "proc/meminfo", "MemTotal is 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := SampleUsage(writeProc(t, tc.stat, tc.meminfo))
			if err == nil {
				t.Fatal("SampleUsage succeeded; want an error")
			}
			if !strings.Contains(err.Error(), tc.wantFile) || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q; want it to name %s and say %q", err, tc.wantFile, tc.wantText)
			}
		})
	}
}

func TestCPUPercentSince(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		prev, cur Usage
		want      float64
	}{
		{"quarter busy", Usage{CPUBusy: 100, CPUTotal: 1000}, Usage{CPUBusy: 150, CPUTotal: 1200}, 25},
		{"all busy", Usage{CPUBusy: 0, CPUTotal: 0}, Usage{CPUBusy: 400, CPUTotal: 400}, 100},
		{"idle", Usage{CPUBusy: 100, CPUTotal: 1000}, Usage{CPUBusy: 100, CPUTotal: 1100}, 0},
		{"no time passed", Usage{CPUBusy: 100, CPUTotal: 1000}, Usage{CPUBusy: 100, CPUTotal: 1000}, 0},
		{"counters reset", Usage{CPUBusy: 900, CPUTotal: 9000}, Usage{CPUBusy: 10, CPUTotal: 100}, 0},
		{"busy went backwards", Usage{CPUBusy: 100, CPUTotal: 1000}, Usage{CPUBusy: 99, CPUTotal: 1100}, 0},
	}
	for _, tc := range tests {
		if got := tc.cur.CPUPercentSince(tc.prev); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: CPUPercentSince = %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestMemPercent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		u    Usage
		want float64
	}{
		{Usage{MemTotalBytes: 1000, MemAvailableBytes: 550}, 45},
		{Usage{MemTotalBytes: 1000, MemAvailableBytes: 1000}, 0},
		{Usage{MemTotalBytes: 1000, MemAvailableBytes: 0}, 100},
		{Usage{}, 0},
		{Usage{MemTotalBytes: 10, MemAvailableBytes: 20}, 0},
	}
	for _, tc := range tests {
		if got := tc.u.MemPercent(); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%+v: MemPercent = %v; want %v", tc.u, got, tc.want)
		}
	}
}
