package hostinfo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/jaypipes/ghw"
)

// Options says which host to read and how.
type Options struct {
	// Root is the host root: "/" for the live machine, or a fixture tree.
	Root string
	// Logger receives debug detail; nil discards it.
	Logger *slog.Logger
}

func (o Options) fs() hostFS {
	root := o.Root
	if root == "" {
		root = "/"
	}
	return hostFS{root: root}
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o.Logger
}

type collector struct {
	h        hostFS
	log      *slog.Logger
	unknowns []UnknownField
}

func (c *collector) unknown(field string, err error) {
	reason := err.Error()
	c.unknowns = append(c.unknowns, UnknownField{Field: field, Reason: reason})
	c.log.Debug("hostinfo: unknown", "field", field, "reason", reason)
}

// ghwArgs keeps ghw quiet and off external tools, reading under our root.
func (c *collector) ghwArgs() []any {
	return []any{ghw.WithChroot(c.h.root), ghw.WithDisableWarnings(), ghw.WithDisableTools()}
}

// Collect reads the inventory of the host under opts.Root. It fails only
// when ctx is done; anything unreadable is recorded in Inventory.Unknowns.
func Collect(ctx context.Context, opts Options) (*Inventory, error) {
	c := &collector{h: opts.fs(), log: opts.logger()}
	inv := &Inventory{}
	steps := []func(*Inventory){
		c.hostOS, c.cpu, c.memory, c.numa, c.hugepages, c.pci, c.nics, c.block, c.kvm, c.iommu,
	}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("host inventory: %w", err)
		}
		step(inv)
	}
	inv.Unknowns = c.unknowns
	if inv.Unknowns == nil {
		inv.Unknowns = []UnknownField{}
	}
	return inv, nil
}

func (c *collector) hostOS(inv *Inventory) {
	var err error
	if inv.Hostname, err = c.h.readString("proc/sys/kernel/hostname"); err != nil {
		if inv.Hostname, err = c.h.readString("etc/hostname"); err != nil {
			c.unknown("hostname", err)
		}
	}
	if inv.OS.Kernel, err = c.h.readString("proc/sys/kernel/osrelease"); err != nil {
		c.unknown("os.kernel", err)
	}
	if inv.OS.BootID, err = c.h.readString("proc/sys/kernel/random/boot_id"); err != nil {
		c.unknown("os.bootID", err)
	}
	rel, err := c.h.readString("etc/os-release")
	if err != nil {
		if rel, err = c.h.readString("usr/lib/os-release"); err != nil {
			c.unknown("os", err)
			return
		}
	}
	for _, line := range strings.Split(rel, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			inv.OS.ID = v
		case "NAME":
			inv.OS.Name = v
		case "VERSION_ID":
			inv.OS.Version = v
		case "PRETTY_NAME":
			inv.OS.PrettyName = v
		}
	}
}

// virtFlagNames are the CPU's virtualisation features. "hypervisor" is
// not one: it says the host is itself a guest (RunsUnderHypervisor).
var virtFlagNames = map[string]bool{"vmx": true, "svm": true, "ept": true, "npt": true}

func (c *collector) cpu(inv *Inventory) {
	f, err := c.h.readString("proc/cpuinfo")
	if err != nil {
		c.unknown("cpu", err)
		return
	}
	sc := bufio.NewScanner(strings.NewReader(f))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "vendor_id":
			if inv.CPU.Vendor == "" {
				inv.CPU.Vendor = v
			}
		case "model name":
			if inv.CPU.Model == "" {
				inv.CPU.Model = v
			}
		case "flags":
			if inv.CPU.Flags == nil {
				inv.CPU.Flags = strings.Fields(v)
			}
		}
	}
	if inv.CPU.Flags == nil {
		c.unknown("cpu.flags", fmt.Errorf("%s has no flags line", c.h.path("proc/cpuinfo")))
	}
	inv.CPU.VirtFlags = []string{}
	for _, fl := range inv.CPU.Flags {
		if virtFlagNames[fl] {
			inv.CPU.VirtFlags = append(inv.CPU.VirtFlags, fl)
		}
	}
	if hasFlag(inv.CPU.Flags, "hypervisor") {
		inv.CPU.RunsUnderHypervisor = true
		inv.CPU.Hypervisor = c.hypervisorName()
	}

	info, err := ghw.CPU(c.ghwArgs()...)
	if err != nil || info == nil || len(info.Processors) == 0 {
		if err == nil {
			err = fmt.Errorf("no processor topology under %s", c.h.path("sys/devices/system/cpu"))
		}
		c.unknown("cpu.topology", err)
		return
	}
	// ghw takes an unreadable physical_package_id or core_id for -1, so
	// empty cpuN directories (gVisor and other sandboxes) would come out as
	// one socket with one core: that is no topology, not a fact.
	for _, p := range info.Processors {
		bad := p.ID < 0
		for _, core := range p.Cores {
			bad = bad || core.ID < 0
		}
		if bad {
			c.unknown("cpu.topology", fmt.Errorf("no physical_package_id or core_id under %s", c.h.path("sys/devices/system/cpu/cpu*/topology")))
			return
		}
	}
	sockets, cores, threads := len(info.Processors), int(info.TotalCores), int(info.TotalHardwareThreads)
	inv.CPU.Sockets = &sockets
	if cores > 0 {
		inv.CPU.Cores = &cores
	} else {
		c.unknown("cpu.cores", fmt.Errorf("ghw counted 0 cores"))
	}
	if threads > 0 {
		inv.CPU.Threads = &threads
	} else {
		c.unknown("cpu.threads", fmt.Errorf("ghw counted 0 hardware threads"))
	}
}

// hypervisorName names the hypervisor we run on, as far as sysfs tells.
func (c *collector) hypervisorName() string {
	if t, err := c.h.readString("sys/hypervisor/type"); err == nil && t != "" {
		return t
	}
	for _, f := range []string{"sys/class/dmi/id/sys_vendor", "sys/class/dmi/id/product_name"} {
		if v, err := c.h.readString(f); err == nil && v != "" {
			return v
		}
	}
	return "" // the CPU says it is virtual but not whose
}

func hasFlag(flags []string, f string) bool {
	for _, x := range flags {
		if x == f {
			return true
		}
	}
	return false
}

// meminfo parses a /proc/meminfo-style file ("Node 0 MemTotal:  123 kB"
// too) into bytes (or plain counts for fields without a unit).
func (c *collector) meminfo(rel string) (map[string]uint64, error) {
	s, err := c.h.readString(rel)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(k)
		if len(fields) == 0 {
			continue // ": 5" names nothing
		}
		key := fields[len(fields)-1]
		vf := strings.Fields(v)
		if len(vf) == 0 {
			continue
		}
		n, err := strconv.ParseUint(vf[0], 10, 64)
		if err != nil {
			continue
		}
		if len(vf) > 1 && vf[1] == "kB" {
			n *= 1024
		}
		out[key] = n
	}
	return out, nil
}

func (c *collector) memory(inv *Inventory) {
	m, err := c.meminfo("proc/meminfo")
	if err != nil {
		c.unknown("memory", err)
		return
	}
	if v, ok := m["MemTotal"]; ok {
		inv.Memory.TotalBytes = &v
	} else {
		c.unknown("memory.totalBytes", fmt.Errorf("%s has no MemTotal", c.h.path("proc/meminfo")))
	}
	if v, ok := m["MemAvailable"]; ok {
		inv.Memory.AvailableBytes = &v
	}
	if v, ok := m["Hugepagesize"]; ok {
		kib := v / 1024
		inv.Hugepages.DefaultSizeKiB = &kib
	}
}

func (c *collector) numa(inv *Inventory) {
	// ghw reports 0 nodes when /sys/devices/system/node is absent
	// (containers); that is an unknown, not a machine without memory.
	topo, gerr := ghw.Topology(c.ghwArgs()...)
	nodes, err := c.h.list("sys/devices/system/node", "node")
	if err != nil || len(nodes) == 0 {
		if err == nil {
			err = fmt.Errorf("no node* entries in %s", c.h.path("sys/devices/system/node"))
		}
		if gerr == nil && topo != nil && len(topo.Nodes) == 0 {
			err = fmt.Errorf("ghw found 0 NUMA nodes: %w", err)
		}
		c.unknown("numa", err)
		return
	}
	sort.Slice(nodes, func(i, j int) bool { return naturalLess(nodes[i], nodes[j]) })
	inv.NUMA.Nodes = []NUMANode{}
	for _, name := range nodes {
		id, err := strconv.Atoi(strings.TrimPrefix(name, "node"))
		if err != nil {
			continue
		}
		dir := filepath.Join("sys/devices/system/node", name)
		n := NUMANode{ID: id}
		if n.CPUs, err = c.h.readString(filepath.Join(dir, "cpulist")); err != nil {
			c.unknown(fmt.Sprintf("numa.nodes[%d].cpus", id), err)
		} else if _, err := parseCPUList(n.CPUs); err != nil {
			n.CPUs = ""
			c.unknown(fmt.Sprintf("numa.nodes[%d].cpus", id), fmt.Errorf("%s: %w", c.h.path(filepath.Join(dir, "cpulist")), err))
		}
		if m, err := c.meminfo(filepath.Join(dir, "meminfo")); err != nil {
			c.unknown(fmt.Sprintf("numa.nodes[%d].memory", id), err)
		} else {
			if v, ok := m["MemTotal"]; ok {
				n.MemTotalBytes = &v
			} else {
				c.unknown(fmt.Sprintf("numa.nodes[%d].memTotalBytes", id), fmt.Errorf("%s has no MemTotal", c.h.path(filepath.Join(dir, "meminfo"))))
			}
			if v, ok := m["MemFree"]; ok {
				n.MemFreeBytes = &v
			}
		}
		n.Hugepages = c.hugepagePools(filepath.Join(dir, "hugepages"), fmt.Sprintf("numa.nodes[%d].hugepages", id), false)
		inv.NUMA.Nodes = append(inv.NUMA.Nodes, n)
	}
}

// hugepagePools reads every hugepages-<size>kB directory under dir.
func (c *collector) hugepagePools(dir, field string, global bool) []HugepagePool {
	pools := []HugepagePool{}
	sizes, err := c.h.list(dir, "hugepages-")
	if err != nil {
		c.unknown(field, err)
		return nil
	}
	for _, s := range sizes {
		kib, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(s, "hugepages-"), "kB"), 10, 64)
		if err != nil {
			continue
		}
		p := HugepagePool{SizeKiB: kib}
		read := func(name string, dst **uint64) {
			v, err := c.h.readInt(filepath.Join(dir, s, name))
			if err == nil && v < 0 {
				err = fmt.Errorf("%s: negative page count %d", c.h.path(filepath.Join(dir, s, name)), v)
			}
			if err != nil {
				c.unknown(fmt.Sprintf("%s[%dkB].%s", field, kib, name), err)
				return
			}
			u := uint64(v)
			*dst = &u
		}
		read("nr_hugepages", &p.Total)
		read("free_hugepages", &p.Free)
		read("surplus_hugepages", &p.Surplus)
		if global {
			read("resv_hugepages", &p.Reserved)
		}
		pools = append(pools, p)
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].SizeKiB < pools[j].SizeKiB })
	return pools
}

func (c *collector) hugepages(inv *Inventory) {
	inv.Hugepages.Pools = c.hugepagePools("sys/kernel/mm/hugepages", "hugepages.pools", true)
	inv.Hugepages.Mounts = []HugetlbfsMount{}
	if mounts, err := c.h.readString("proc/mounts"); err != nil {
		c.unknown("hugepages.mounts", err)
	} else {
		for _, line := range strings.Split(mounts, "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || f[2] != "hugetlbfs" {
				continue
			}
			m := HugetlbfsMount{Path: f[1]}
			for _, o := range strings.Split(f[3], ",") {
				if v, ok := strings.CutPrefix(o, "pagesize="); ok {
					m.PageSizeKiB = parseSizeKiB(v)
				}
			}
			if m.PageSizeKiB == 0 && inv.Hugepages.DefaultSizeKiB != nil {
				m.PageSizeKiB = *inv.Hugepages.DefaultSizeKiB
			}
			inv.Hugepages.Mounts = append(inv.Hugepages.Mounts, m)
		}
	}
	thp, err := c.h.readString("sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		c.unknown("hugepages.transparent", err)
		return
	}
	inv.Hugepages.THP = bracketed(thp)
}

// bracketed returns the [selected] word of a sysfs choice file.
func bracketed(s string) string {
	for _, w := range strings.Fields(s) {
		if strings.HasPrefix(w, "[") && strings.HasSuffix(w, "]") {
			return strings.Trim(w, "[]")
		}
	}
	return s
}

// parseSizeKiB turns "2M", "1G", "2048k" into KiB.
func parseSizeKiB(s string) uint64 {
	s = strings.ToUpper(strings.TrimSpace(s))
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		s = strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		s, mult = strings.TrimSuffix(s, "M"), 1024
	case strings.HasSuffix(s, "G"):
		s, mult = strings.TrimSuffix(s, "G"), 1024*1024
	default:
		n, _ := strconv.ParseUint(s, 10, 64)
		return n / 1024
	}
	n, _ := strconv.ParseUint(s, 10, 64)
	return n * mult
}
