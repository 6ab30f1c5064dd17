package netcfg

import (
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// bridgeTestMsg is an RTM_NEWLINK payload: an ifinfomsg and IFLA_LINKINFO
// of kind (with data attrs) and slave kind (with slave data attrs).
func bridgeTestMsg(kind string, data map[int][]byte, slaveKind string, slave map[int][]byte) []byte {
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC).Serialize()
	li := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	if kind != "" {
		li.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated(kind))
		d := li.AddRtAttr(nl.IFLA_INFO_DATA, nil)
		for k, v := range data {
			d.AddRtAttr(k, v)
		}
	}
	if slaveKind != "" {
		li.AddRtAttr(nl.IFLA_INFO_SLAVE_KIND, nl.NonZeroTerminated(slaveKind))
		d := li.AddRtAttr(nl.IFLA_INFO_SLAVE_DATA, nil)
		for k, v := range slave {
			d.AddRtAttr(k, v)
		}
	}
	mtu := nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(1500))
	return append(append(msg, mtu.Serialize()...), li.Serialize()...)
}

func TestParseBridgeAttrs(t *testing.T) {
	br := map[int][]byte{
		nl.IFLA_BR_STP_STATE:      nl.Uint32Attr(1),
		nl.IFLA_BR_FORWARD_DELAY:  nl.Uint32Attr(4 * bridgeUserHZ),
		nl.IFLA_BR_VLAN_FILTERING: nl.Uint8Attr(1),
	}
	port := map[int][]byte{nl.IFLA_BRPORT_STATE: nl.Uint8Attr(brPortLearning)}
	tests := []struct {
		name string
		msg  []byte
		want bridgeAttrs
	}{
		{"bridge", bridgeTestMsg("bridge", br, "", nil), bridgeAttrs{stp: true, forwardDelay: 4 * time.Second, vlanFiltering: true}},
		{"bridge, STP off", bridgeTestMsg("bridge", map[int][]byte{nl.IFLA_BR_STP_STATE: nl.Uint32Attr(0)}, "", nil), bridgeAttrs{}},
		{"port of a bridge", bridgeTestMsg("veth", nil, "bridge", port), bridgeAttrs{port: true, portState: brPortLearning}},
		{"bridge data of another kind", bridgeTestMsg("vlan", br, "", nil), bridgeAttrs{}},
		{"port of a bond", bridgeTestMsg("", nil, "bond", port), bridgeAttrs{}},
		{"no link info", nl.NewIfInfomsg(unix.AF_UNSPEC).Serialize(), bridgeAttrs{}},
	}
	for _, tc := range tests {
		got, err := parseBridgeAttrs(tc.msg)
		if err != nil || got != tc.want {
			t.Errorf("%s: parseBridgeAttrs = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := parseBridgeAttrs([]byte{1, 2}); err == nil {
		t.Error("parseBridgeAttrs of 2 bytes: no error")
	}
	for s, want := range map[uint8]string{brPortForwarding: "forwarding", brPortBlocking: "blocking", 9: "state 9"} {
		if got := brPortStateName(s); got != want {
			t.Errorf("brPortStateName(%d) = %q; want %q", s, got, want)
		}
	}
}
