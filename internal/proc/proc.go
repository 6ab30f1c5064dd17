package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Stat is what /proc/PID/stat tells about a process.
type Stat struct {
	// State is field 3: R, S, D, Z (zombie), X (dead), ...
	State byte
	// Start is field 22, the start time in clock ticks after boot: with
	// the boot ID it tells a process from a later one with its PID.
	Start uint64
	// Comm is field 2, the command (or thread) name without its
	// parentheses: QEMU names its vCPU threads "CPU 0/TCG".
	Comm string
	// UTime and STime are fields 14 and 15, the CPU time spent in user
	// and kernel mode, in clock ticks.
	UTime, STime uint64
}

// Gone reports whether the process has exited (a zombie waits only to
// be reaped).
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// ReadStat reads /proc/PID/stat. A process that does not exist gives an
// error that errors.Is(err, fs.ErrNotExist) (or ESRCH, when it exits
// while being read).
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(string(b))
}

// ParseStat reads "PID (COMM) STATE PPID ... STARTTIME ...": COMM may
// hold spaces and parentheses, so the fields start after the last ')'.
func ParseStat(s string) (Stat, error) {
	open, i := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || i < open {
		return Stat{}, fmt.Errorf("proc stat %q: no command name", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime, stime and the start time are
	// fields 14, 15 and 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("proc stat %q: too few fields", s)
	}
	st := Stat{State: f[0][0], Comm: s[open+1 : i]}
	for _, x := range []struct {
		what string
		i    int
		v    *uint64
	}{{"utime", 11, &st.UTime}, {"stime", 12, &st.STime}, {"start time", 19, &st.Start}} {
		n, err := strconv.ParseUint(f[x.i], 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("proc stat: %s %q: %w", x.what, f[x.i], err)
		}
		*x.v = n
	}
	return st, nil
}

// BootID is this boot's ID (/proc/sys/kernel/random/boot_id), "" when it
// cannot be read: a start time means nothing in another boot.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// Same reports whether the process pid is still the one a record wrote
// down: started at start in the boot bootID ("" when the record has
// none), and not exited. A process that is gone is false, nil; an error
// is a stat that could not be read for another reason.
func Same(pid int, start uint64, bootID string) (bool, error) {
	if boot := BootID(); bootID != "" && boot != "" && bootID != boot {
		return false, nil
	}
	st, err := ReadStat(pid)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("pid %d: %w", pid, err)
	}
	return !st.Gone() && st.Start == start, nil
}
