package hostinfo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/virtcon/virtcon/hostinfo/kvmprobe"
	"github.com/virtcon/virtcon/internal/atomicfile"
)

// AccelCache is the acceleration verdict remembered for one boot, so that
// starting a VM never pays for the KVM probe. `virt host check` refreshes it.
type AccelCache struct {
	BootID       string    `json:"bootID"`
	Acceleration string    `json:"acceleration"`
	Reason       string    `json:"reason"`
	CheckedAt    time.Time `json:"checkedAt"`
	// Probe is the probe result the verdict came from, so a cached check
	// report is as complete as a fresh one.
	Probe *kvmprobe.Result `json:"probe,omitempty"`
}

// SaveAccelCache writes the verdict atomically.
func SaveAccelCache(path string, c AccelCache) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// LoadAccelCache returns the cached verdict if it was made in this boot.
func LoadAccelCache(path, bootID string) (AccelCache, error) {
	var c AccelCache
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("acceleration cache %s: %w", path, err)
	}
	if bootID == "" || c.BootID != bootID {
		return c, fmt.Errorf("acceleration cache %s: made in boot %q, this is boot %q", path, c.BootID, bootID)
	}
	return c, nil
}

// Acceleration returns the verdict for VMs with accel: auto: the cached one
// when it was made in this boot, else it runs the KVM probe once (about 0.4s
// on a host whose KVM crawls, milliseconds where it works), caches the
// result and returns it. QEMU's presence is not judged here; starting a VM
// finds out.
func Acceleration(ctx context.Context, opts Options, cachePath string, probe ProbeFunc) (accel, reason string) {
	h := opts.fs()
	boot, _ := h.readString("proc/sys/kernel/random/boot_id")
	if c, err := LoadAccelCache(cachePath, boot); err == nil && (c.Acceleration == AccelKVM || c.Acceleration == AccelTCG) {
		return c.Acceleration, c.Reason + " (cached for this boot)"
	}
	var res kvmprobe.Result
	if !h.exists("dev/kvm") {
		accel, reason = AccelTCG, "no /dev/kvm"
	} else {
		if probe == nil {
			probe = func(ctx context.Context, dev string) kvmprobe.Result {
				return kvmprobe.Run(ctx, kvmprobe.Options{Device: dev, Logger: opts.logger()})
			}
		}
		res = probe(ctx, h.path("dev/kvm"))
		if ok, why := res.Verdict(); ok {
			accel, reason = AccelKVM, "the KVM probe ran guest code at hardware speed"
		} else {
			accel, reason = AccelTCG, "KVM probe FAIL: "+why
		}
	}
	if boot != "" {
		c := AccelCache{BootID: boot, Acceleration: accel, Reason: reason, CheckedAt: time.Now().UTC()}
		if res.Stage != "" {
			c.Probe = &res
		}
		if err := SaveAccelCache(cachePath, c); err != nil {
			opts.logger().Debug("acceleration verdict not cached", "err", err)
		}
	}
	return accel, reason
}

// Capacity returns the host's logical CPU count and memory in MiB cheaply
// (for validating VM sizes), 0 for what cannot be read.
func Capacity(root string) (cpus, memoryMiB int) {
	c := &collector{h: Options{Root: root}.fs(), log: Options{}.logger()}
	if s, err := c.h.readString("proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(s, "\n") {
			if strings.HasPrefix(line, "processor") {
				cpus++
			}
		}
	}
	if m, err := c.meminfo("proc/meminfo"); err == nil {
		memoryMiB = int(m["MemTotal"] >> 20)
	}
	return cpus, memoryMiB
}

// CachedProbe returns a ProbeFunc that answers from the per-boot cache
// written by `virt host check` (or a VM start) when it holds a probe
// result for this boot, and runs fallback otherwise. Screens that refresh
// their checks often use it, so they do not run guest code every time.
func CachedProbe(opts Options, cachePath string, fallback ProbeFunc) ProbeFunc {
	return func(ctx context.Context, dev string) kvmprobe.Result {
		boot, _ := opts.fs().readString("proc/sys/kernel/random/boot_id")
		if c, err := LoadAccelCache(cachePath, boot); err == nil && c.Probe != nil {
			return *c.Probe
		}
		if fallback == nil {
			fallback = func(ctx context.Context, dev string) kvmprobe.Result {
				return kvmprobe.Run(ctx, kvmprobe.Options{Device: dev, Logger: opts.logger()})
			}
		}
		return fallback(ctx, dev)
	}
}
