package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/hostinfo"
)

func TestCapabilities(t *testing.T) {
	t.Parallel()
	rep := &hostinfo.Report{
		Acceleration: hostinfo.AccelTCG, AccelerationReason: "probe too slow",
		Checks: []hostinfo.Check{
			{ID: "kvm.probe", Status: hostinfo.Pass, Detail: "ran guest code"},
			{ID: "qemu.binary", Status: hostinfo.Pass, Detail: "/usr/bin/qemu-system-x86_64 version 7.2.19"},
			{ID: "firmware.ovmf", Status: hostinfo.Warn, Detail: "no OVMF"},
			{ID: "iommu.kernel", Status: hostinfo.Unknown, Detail: "needs root"},
			{ID: "kvm.nested", Status: hostinfo.Fail, Detail: "off"},
			{ID: "cgroup.v2", Status: hostinfo.Pass, Detail: "cgroup v2 at /sys/fs/cgroup"},
		},
	}
	want := map[string]struct {
		available bool
		detail    string
	}{
		"kvm":       {false, "acceleration verdict tcg: probe too slow"}, // PASS alone is not enough: the verdict must be kvm
		"tcg":       {true, "/usr/bin/qemu-system-x86_64 version 7.2.19"},
		"uefi":      {false, "WARN: no OVMF"},
		"iommu":     {false, "UNKNOWN: needs root"}, // unknown = unavailable
		"nested":    {false, "FAIL: off"},
		"hugepages": {false, "not checked: no check hugepages on this host"},
		"cgroup-v2": {true, "cgroup v2 at /sys/fs/cgroup"},
		"vm-scopes": {false, "not checked: no check vm.scopes on this host"},
	}
	caps := capabilities(rep, "")
	if len(caps) != len(want) {
		t.Fatalf("%d capabilities; want %d", len(caps), len(want))
	}
	for _, c := range caps {
		w, ok := want[c.GetName()]
		if !ok || c.GetAvailable() != w.available || c.GetDetail() != w.detail {
			t.Errorf("%s: available %v %q; want %v %q", c.GetName(), c.GetAvailable(), c.GetDetail(), w.available, w.detail)
		}
	}
	rep.Acceleration = hostinfo.AccelKVM
	if c := capabilities(rep, "")[0]; !c.GetAvailable() || c.GetDetail() != "ran guest code" {
		t.Errorf("kvm with a PASSing probe and verdict kvm: %v %q; want available", c.GetAvailable(), c.GetDetail())
	}
	for _, c := range capabilities(nil, "checks failed") {
		if c.GetAvailable() || !strings.Contains(c.GetDetail(), "checks failed") {
			t.Errorf("without a report: %s %v %q; want unavailable, saying why", c.GetName(), c.GetAvailable(), c.GetDetail())
		}
	}
	if v := qemuVersion("/usr/bin/qemu-system-x86_64 version 7.2.19"); v != "7.2.19" {
		t.Errorf("qemuVersion = %q", v)
	}
}

// On the PVM build host's tree KVM is honestly unavailable, and the facts
// come from the tree.
func TestHostFactsFixture(t *testing.T) {
	t.Parallel()
	h := testHost(t)
	f, caps := newHostView(h).facts(context.Background())
	if f.GetHostname() == "" || f.GetKernel() == "" || f.GetAgentVersion() == "" {
		t.Errorf("facts %v: want hostname, kernel and version from the fixture", f)
	}
	for _, c := range caps {
		if c.GetName() == "kvm" && c.GetAvailable() {
			t.Errorf("kvm available on the PVM fixture (%q); want unavailable", c.GetDetail())
		}
	}
}
