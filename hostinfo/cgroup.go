package hostinfo

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ProcessCgroup is where a process runs among the host's cgroups, and
// what its cgroup has used when that cgroup is the process's own. Nil
// numbers are unknown: a cgroup shared with other processes (the root, a
// login session) says nothing about this one, and a controller that is
// not mounted or not enabled there has no file to read.
type ProcessCgroup struct {
	// Path is the process's cgroup: the unified (v2) one, else the v1
	// name=systemd one.
	Path string
	// Unit is the systemd unit the cgroup belongs to (the last
	// ".scope"/".service" in Path), "" outside one.
	Unit string
	// CPU is the cgroup's CPU time, user and system (v2 cpu.stat
	// usage_usec, v1 cpuacct.usage).
	CPU *time.Duration
	// MemoryBytes is the cgroup's memory use (v2 memory.current, v1
	// memory.usage_in_bytes).
	MemoryBytes *uint64
}

// cgroupMounts are the host's cgroup hierarchies: the cgroup2 mount and
// the v1 mounts by controller (and "name=systemd").
type cgroupMounts struct {
	v2 string
	v1 map[string]string
}

func (h hostFS) cgroupMounts() (cgroupMounts, error) {
	m := cgroupMounts{v1: map[string]string{}}
	mounts, err := h.readString("proc/mounts")
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		switch f[2] {
		case "cgroup2":
			if m.v2 == "" || f[1] == "/sys/fs/cgroup" {
				m.v2 = f[1]
			}
		case "cgroup":
			for _, opt := range strings.Split(f[3], ",") {
				if _, taken := m.v1[opt]; !taken {
					m.v1[opt] = f[1]
				}
			}
		}
	}
	return m, nil
}

// ReadProcessCgroup reads where process pid runs under the host root
// ("/": this host) and, when its cgroup holds only that process, what the
// cgroup has used. It only reads.
func ReadProcessCgroup(root string, pid int) (*ProcessCgroup, error) {
	h := hostFS{root: root}
	text, err := h.readString(path.Join("proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("cgroup of pid %d: %w", pid, err)
	}
	mounts, err := h.cgroupMounts()
	if err != nil {
		return nil, fmt.Errorf("cgroup of pid %d: mounts: %w", pid, err)
	}
	// the process's path in each hierarchy: "" for v2, else its controllers
	paths := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			paths[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	pc := &ProcessCgroup{Path: paths[""]}
	if pc.Path == "" || pc.Path == "/" && paths["name=systemd"] != "" {
		pc.Path = paths["name=systemd"]
	}
	if pc.Path == "" {
		return nil, fmt.Errorf("cgroup of pid %d: no unified or name=systemd hierarchy in %q", pid, text)
	}
	pc.Unit = unitOf(pc.Path)

	// own is the cgroup directory of hierarchy key, when the process is
	// the only one in it (a QEMU's threads are all one process)
	own := func(key, mnt string) (string, bool) {
		p, ok := paths[key]
		if !ok || mnt == "" {
			return "", false
		}
		dir := strings.TrimPrefix(path.Join(mnt, p), "/")
		procs, err := h.readString(path.Join(dir, "cgroup.procs"))
		if err != nil || !slices.Equal(strings.Fields(procs), []string{strconv.Itoa(pid)}) {
			return "", false
		}
		return dir, true
	}
	if dir, ok := own("", mounts.v2); ok {
		if us, ok := flatKey(h, path.Join(dir, "cpu.stat"), "usage_usec"); ok {
			d := time.Duration(us) * time.Microsecond
			pc.CPU = &d
		}
		if b, err := h.readInt(path.Join(dir, "memory.current")); err == nil && b >= 0 {
			u := uint64(b)
			pc.MemoryBytes = &u
		}
	}
	if dir, ok := own("cpuacct", mounts.v1["cpuacct"]); ok && pc.CPU == nil {
		if ns, err := h.readInt(path.Join(dir, "cpuacct.usage")); err == nil && ns >= 0 {
			d := time.Duration(ns)
			pc.CPU = &d
		}
	}
	if dir, ok := own("memory", mounts.v1["memory"]); ok && pc.MemoryBytes == nil {
		if b, err := h.readInt(path.Join(dir, "memory.usage_in_bytes")); err == nil && b >= 0 {
			u := uint64(b)
			pc.MemoryBytes = &u
		}
	}
	return pc, nil
}

// flatKey reads one key of a flat-keyed cgroup file ("usage_usec 123").
func flatKey(h hostFS, rel, key string) (int64, bool) {
	s, err := h.readString(rel)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			v, err := strconv.ParseInt(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// unitOf is the systemd unit a cgroup path belongs to: its last scope or
// service ("" in a slice or outside systemd's tree).
func unitOf(p string) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if strings.HasSuffix(parts[i], ".scope") || strings.HasSuffix(parts[i], ".service") {
			return parts[i]
		}
	}
	return ""
}
