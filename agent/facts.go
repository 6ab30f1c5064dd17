package agent

import (
	"context"
	"strings"
	"sync"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/hostinfo"
	"github.com/virtcon/virtcon/internal/buildinfo"
)

// Capability names (a closed list) and the host check each is read from.
// A capability is available only when its check PASSed; WARN, FAIL,
// UNKNOWN or a check that did not run is unavailable, with the check's
// detail: unknown is unavailable.
var capabilityChecks = []struct{ name, check string }{
	{"kvm", "kvm.probe"},
	{"tcg", "qemu.binary"},
	{"uefi", "firmware.ovmf"},
	{"iommu", "iommu.kernel"},
	{"nested", "kvm.nested"},
	{"hugepages", "hugepages"},
	{"cgroup-v2", "cgroup.v2"},
	{"vm-scopes", "vm.scopes"},
}

// checksTTL bounds how often the agent runs the host's checks (the probe
// itself is cached per boot): for a registration and the host reports'
// worst check.
const checksTTL = 5 * time.Minute

// hostView is what the agent reads of the host, with the checks cached.
type hostView struct {
	h   *host.Host
	now func() time.Time

	mu      sync.Mutex
	checked time.Time
	inv     *hostinfo.Inventory
	rep     *hostinfo.Report
	err     error
}

func newHostView(h *host.Host) *hostView { return &hostView{h: h, now: time.Now} }

// checks returns the inventory and check report, run again when older
// than checksTTL. The KVM probe is answered from this boot's cache.
func (v *hostView) checks(ctx context.Context) (*hostinfo.Inventory, *hostinfo.Report, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.rep == nil || v.now().Sub(v.checked) > checksTTL || v.now().Before(v.checked) {
		v.inv, v.rep, v.err = v.h.Info.Check(ctx, hostinfo.CheckRequest{})
		v.checked = v.now()
	}
	return v.inv, v.rep, v.err
}

// facts are the host's identity and software, and its capabilities.
func (v *hostView) facts(ctx context.Context) (*directorv1.HostFacts, []*directorv1.Capability) {
	f := &directorv1.HostFacts{AgentVersion: buildinfo.Get().Version}
	if u, err := hostinfo.HostUUID(v.h.HostRoot); err == nil {
		f.HostUuid = u
	} else {
		v.h.Log.Warn("host uuid unknown", "err", err)
	}
	inv, rep, err := v.checks(ctx)
	if err != nil {
		v.h.Log.Warn("host checks did not run: every capability unavailable", "err", err)
		return f, capabilities(nil, err.Error())
	}
	f.Hostname, f.BootId = inv.Hostname, inv.OS.BootID
	f.OsPretty, f.Kernel = inv.OS.PrettyName, inv.OS.Kernel
	if c, ok := rep.Check("qemu.binary"); ok && c.Status == hostinfo.Pass {
		f.QemuVersion = qemuVersion(c.Detail)
	}
	return f, capabilities(rep, "")
}

// capabilities maps the check report onto the capability list.
func capabilities(rep *hostinfo.Report, why string) []*directorv1.Capability {
	out := make([]*directorv1.Capability, 0, len(capabilityChecks))
	for _, cc := range capabilityChecks {
		c := &directorv1.Capability{Name: cc.name, Detail: "not checked: " + why}
		if rep != nil {
			if chk, ok := rep.Check(cc.check); ok {
				c.Available = chk.Status == hostinfo.Pass
				c.Detail = chk.Detail
				if !c.Available {
					c.Detail = string(chk.Status) + ": " + chk.Detail
				}
			} else {
				c.Detail = "not checked: no check " + cc.check + " on this host"
			}
		}
		// kvm only when the per-boot verdict is kvm too: the probe ran
		// guest code at hardware speed
		if cc.name == "kvm" && c.Available && rep.Acceleration != hostinfo.AccelKVM {
			c.Available, c.Detail = false, "acceleration verdict "+rep.Acceleration+": "+rep.AccelerationReason
		}
		out = append(out, c)
	}
	return out
}

// qemuVersion is the version in the qemu.binary check's detail
// ("/usr/bin/qemu-system-x86_64 version 7.2.19").
func qemuVersion(detail string) string {
	_, v, ok := strings.Cut(detail, " version ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}
