//go:build integration

package netcfg

import (
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The one bridge-attribute codec over both sockets: what is written on a
// handle's socket reads back on a fresh one and the other way round, for
// a bridge (STP, forward delay, VLAN filtering) and its port (STP state).
func TestBridgeAttrsIntegration(t *testing.T) {
	applyITNS(t)
	applyITVeth(t, "p1", "p1x", netns.None())
	applyITMust(t, netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br9"}}))
	h, err := openHandle()
	applyITMust(t, err)
	defer h.Close()
	applyITMust(t, setMaster(h, "p1", "br9"))
	applyITMust(t, setUp(h, "br9", true))
	br, err := netlink.LinkByName("br9")
	applyITMust(t, err)
	p1, err := netlink.LinkByName("p1")
	applyITMust(t, err)
	idx := br.Attrs().Index

	read := func(what string) (viaHandle, viaFresh bridgeAttrs) {
		t.Helper()
		a, err := readBridgeAttrs(h.raw, idx)
		applyITMust(t, err)
		b, err := readBridgeAttrs(nil, idx)
		applyITMust(t, err)
		if a != b {
			t.Errorf("%s: the handle's socket reads %+v, a fresh one %+v", what, a, b)
		}
		return a, b
	}
	if a, _ := read("new bridge"); a.stp || a.port {
		t.Errorf("new bridge: %+v; want STP off, no port", a)
	}
	// on the handle's socket
	applyITMust(t, h.setBridgeSTP("br9", true))
	if on, err := h.bridgeSTP(idx); err != nil || !on {
		t.Errorf("bridgeSTP after turning it on = %t, %v", on, err)
	}
	if a, _ := read("STP on by the handle"); !a.stp {
		t.Errorf("STP on by the handle: %+v; want STP on", a)
	}
	// on a fresh socket, with the forward delay
	applyITMust(t, writeBridgeSTP(nil, idx, true, 4*time.Second))
	if a, _ := read("forward delay by a fresh socket"); !a.stp || a.forwardDelay != 4*time.Second {
		t.Errorf("after writeBridgeSTP(on, 4s): %+v; want STP on, forward delay 4s", a)
	}
	if st := applyITState(t).Link("br9"); st == nil || !st.STP {
		t.Errorf("ReadState: br9 %+v; want STP on", st)
	}
	applyITMust(t, writeBridgeSTP(h.raw, idx, false, 0))
	if a, _ := read("STP off by the handle"); a.stp || a.forwardDelay != 4*time.Second {
		t.Errorf("after writeBridgeSTP(off): %+v; want STP off, the forward delay kept", a)
	}
	// the port
	pa, err := readBridgeAttrs(nil, p1.Attrs().Index)
	applyITMust(t, err)
	pb, err := readBridgeAttrs(h.raw, p1.Attrs().Index)
	applyITMust(t, err)
	if !pa.port || pa != pb {
		t.Errorf("port p1: fresh %+v, handle %+v; want a bridge port, read alike", pa, pb)
	}
}
