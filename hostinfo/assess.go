package hostinfo

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// Assessor answers what every face asks of the host: the inventory, the
// checks, and the acceleration verdict that VMs with accel: auto use. It
// owns the rule for the KVM probe: a fresh check (`virt host check`) runs
// it and remembers the verdict for this boot; a screen that refreshes, or
// a bundle, answers it from that memory, so only the first pays for it.
type Assessor struct {
	opts      Options
	cacheFile string
	probe     ProbeFunc // the real probe when nil (tests set it)
}

// NewAssessor returns an Assessor reading the host under opts.Root, with
// the per-boot verdict cache at cacheFile (paths.Layout.AccelCacheFile).
func NewAssessor(opts Options, cacheFile string) *Assessor {
	return &Assessor{opts: opts, cacheFile: cacheFile}
}

// Inventory collects the hardware inventory.
func (a *Assessor) Inventory(ctx context.Context) (*Inventory, error) {
	return Collect(ctx, a.opts)
}

// CheckRequest says how Check runs the KVM probe.
type CheckRequest struct {
	// Fresh runs the probe now (and remembers its verdict for this boot)
	// instead of answering it from this boot's cache.
	Fresh bool
	// ProbeTimeout bounds a fresh probe (default 3s).
	ProbeTimeout time.Duration
}

// Check collects the inventory and runs every check. A fresh check on the
// live host saves the verdict for this boot, so VM starts skip the probe.
func (a *Assessor) Check(ctx context.Context, req CheckRequest) (*Inventory, *Report, error) {
	inv, err := Collect(ctx, a.opts)
	if err != nil {
		return nil, nil, err
	}
	// a check that answers the probe from this boot's cache, on a cold
	// cache, runs it once and remembers the verdict like a fresh one
	remember := req.Fresh
	if !remember && a.live() {
		_, err := LoadAccelCache(a.cacheFile, inv.OS.BootID)
		remember = err != nil
	}
	rep := RunChecks(ctx, inv, a.checkOptions(req))
	if remember && a.live() && inv.OS.BootID != "" && rep.Probe != nil {
		c := AccelCache{BootID: inv.OS.BootID, Acceleration: rep.Acceleration, Reason: rep.AccelerationReason, CheckedAt: time.Now().UTC(), Probe: rep.Probe}
		if err := SaveAccelCache(a.cacheFile, c); err != nil {
			a.opts.logger().Debug("acceleration verdict not cached", "err", err)
		}
	}
	return inv, rep, nil
}

// CheckOptions are the options Check runs the checks with: for a part of
// a diagnostics bundle, which collects on its own.
func (a *Assessor) CheckOptions(req CheckRequest) CheckOptions { return a.checkOptions(req) }

func (a *Assessor) checkOptions(req CheckRequest) CheckOptions {
	o := CheckOptions{Options: a.opts, ProbeTimeout: req.ProbeTimeout, Probe: a.probe}
	if !req.Fresh {
		o.Probe = CachedProbe(a.opts, a.cacheFile, a.probe)
	}
	return o
}

// Acceleration is the verdict for accel: auto, from this boot's cache or
// a probe run now (which is then remembered). VM starts ask it.
func (a *Assessor) Acceleration(ctx context.Context) (accel, reason string) {
	return Acceleration(ctx, a.opts, a.cacheFile, a.probe)
}

// Usage samples CPU and memory use.
func (a *Assessor) Usage() (Usage, error) { return SampleUsage(a.opts.Root) }

func (a *Assessor) live() bool { return a.opts.Root == "" || a.opts.Root == "/" }

// Addr is one address of an interface that is up.
type Addr struct {
	Iface  string
	Prefix netip.Prefix
}

// Addresses lists the addresses of the up, non-loopback interfaces, in
// this process's network namespace: what a console shows as the ways in.
func (a *Assessor) Addresses() ([]Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			ipn, ok := ad.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok || ip.IsLoopback() {
				continue
			}
			ones, _ := ipn.Mask.Size()
			out = append(out, Addr{Iface: ifc.Name, Prefix: netip.PrefixFrom(ip.Unmap(), ones)})
		}
	}
	return out, nil
}
