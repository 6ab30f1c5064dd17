package netcfg

// The bridge attributes that the netlink library does not speak (STP, the
// forward delay, a port's STP state), read and written by raw
// RTM_GETLINK/RTM_NEWLINK messages: the one codec that ReadState, Apply,
// a snapshot, its restore and the verification all use. sock is the
// socket to send on: a handle's (bound to the namespace the handle was
// opened in), or nil for a fresh one in the calling thread's namespace.
// (sysfs has these too, but /sys shows the namespace it was mounted in,
// not ours.)

import (
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// bridgeAttrs are a link's bridge and bridge-port attributes.
type bridgeAttrs struct {
	stp           bool
	forwardDelay  time.Duration
	vlanFiltering bool
	// port: the link is a bridge port, in portState (BR_STATE_*).
	port      bool
	portState uint8
}

// Bridge port STP states (BR_STATE_*).
const (
	brPortDisabled   = 0
	brPortListening  = 1
	brPortLearning   = 2
	brPortForwarding = 3
	brPortBlocking   = 4
)

func brPortStateName(s uint8) string {
	switch s {
	case brPortDisabled:
		return "disabled"
	case brPortListening:
		return "listening"
	case brPortLearning:
		return "learning"
	case brPortForwarding:
		return "forwarding"
	case brPortBlocking:
		return "blocking"
	}
	return fmt.Sprintf("state %d", s)
}

// bridgeUserHZ is the unit (clock_t) of the kernel's bridge timers over
// netlink.
const bridgeUserHZ = 100

// bridgeRequest is a netlink request of typ sent on sock (nil: a fresh
// socket).
func bridgeRequest(sock *nl.SocketHandle, typ, flags int, index int) *nl.NetlinkRequest {
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Len:   uint32(unix.SizeofNlMsghdr),
			Type:  uint16(typ),
			Flags: unix.NLM_F_REQUEST | uint16(flags),
		},
	}
	if sock != nil {
		req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: sock}
	}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	return req
}

// readBridgeAttrs reads the bridge and bridge-port attributes of the link
// index.
func readBridgeAttrs(sock *nl.SocketHandle, index int) (bridgeAttrs, error) {
	msgs, err := bridgeRequest(sock, unix.RTM_GETLINK, 0, index).Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return bridgeAttrs{}, fmt.Errorf("read bridge attributes of link %d: %w", index, err)
	}
	if len(msgs) != 1 {
		return bridgeAttrs{}, fmt.Errorf("read bridge attributes of link %d: %d answers", index, len(msgs))
	}
	ba, err := parseBridgeAttrs(msgs[0])
	if err != nil {
		return ba, fmt.Errorf("read bridge attributes of link %d: %w", index, err)
	}
	return ba, nil
}

// parseBridgeAttrs decodes an RTM_NEWLINK message (from its ifinfomsg on):
// IFLA_LINKINFO's bridge data when the link is a bridge, its bridge-port
// data when it is a port of one.
func parseBridgeAttrs(msg []byte) (bridgeAttrs, error) {
	var ba bridgeAttrs
	if len(msg) < unix.SizeofIfInfomsg {
		return ba, fmt.Errorf("short message (%d bytes)", len(msg))
	}
	ifi := nl.DeserializeIfInfomsg(msg)
	attrs, err := nl.ParseRouteAttr(msg[ifi.Len():])
	if err != nil {
		return ba, err
	}
	for _, a := range attrs {
		if a.Attr.Type&nl.NLA_TYPE_MASK != unix.IFLA_LINKINFO {
			continue
		}
		infos, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return ba, err
		}
		var kind, slaveKind string
		for _, info := range infos {
			switch info.Attr.Type & nl.NLA_TYPE_MASK {
			case nl.IFLA_INFO_KIND:
				kind = strings.TrimRight(string(info.Value), "\x00")
			case nl.IFLA_INFO_SLAVE_KIND:
				slaveKind = strings.TrimRight(string(info.Value), "\x00")
			case nl.IFLA_INFO_DATA:
				if kind != "bridge" {
					continue
				}
				data, err := nl.ParseRouteAttr(info.Value)
				if err != nil {
					return ba, err
				}
				for _, d := range data {
					switch d.Attr.Type & nl.NLA_TYPE_MASK {
					case nl.IFLA_BR_STP_STATE:
						ba.stp = len(d.Value) >= 4 && native32(d.Value) != 0
					case nl.IFLA_BR_FORWARD_DELAY:
						if len(d.Value) >= 4 {
							ba.forwardDelay = time.Duration(native32(d.Value)) * time.Second / bridgeUserHZ
						}
					case nl.IFLA_BR_VLAN_FILTERING:
						ba.vlanFiltering = len(d.Value) >= 1 && d.Value[0] != 0
					}
				}
			case nl.IFLA_INFO_SLAVE_DATA:
				if slaveKind != "bridge" {
					continue
				}
				data, err := nl.ParseRouteAttr(info.Value)
				if err != nil {
					return ba, fmt.Errorf("bridge port: %w", err)
				}
				for _, d := range data {
					if d.Attr.Type&nl.NLA_TYPE_MASK == nl.IFLA_BRPORT_STATE && len(d.Value) >= 1 {
						ba.port, ba.portState = true, d.Value[0]
					}
				}
			}
		}
	}
	return ba, nil
}

func native32(b []byte) uint32 { return nl.NativeEndian().Uint32(b[:4]) }

// setBridgeAttr sets one 32-bit attribute (IFLA_BR_*) of the bridge
// index by changelink.
func setBridgeAttr(sock *nl.SocketHandle, index, attr int, v uint32) error {
	req := bridgeRequest(sock, unix.RTM_NEWLINK, unix.NLM_F_ACK, index)
	li := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	li.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
	data := li.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	data.AddRtAttr(attr, nl.Uint32Attr(v))
	req.AddData(li)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// writeBridgeSTP sets a bridge's STP state and, when positive, its
// forward delay. The kernel accepts a forward delay of 2-30 s only while
// STP is on, so the delay is set first when turning STP on and last when
// turning it off.
func writeBridgeSTP(sock *nl.SocketHandle, index int, stp bool, forwardDelay time.Duration) error {
	setFD := func() error {
		if forwardDelay <= 0 {
			return nil
		}
		if err := setBridgeAttr(sock, index, nl.IFLA_BR_FORWARD_DELAY, uint32(forwardDelay*bridgeUserHZ/time.Second)); err != nil {
			return fmt.Errorf("set forward delay %v: %w", forwardDelay, err)
		}
		return nil
	}
	setSTP := func() error {
		if err := setBridgeAttr(sock, index, nl.IFLA_BR_STP_STATE, boolAttr(stp)); err != nil {
			return fmt.Errorf("set stp %v: %w", stp, err)
		}
		return nil
	}
	if stp {
		if err := setFD(); err != nil {
			return err
		}
		return setSTP()
	}
	if err := setSTP(); err != nil {
		return err
	}
	return setFD()
}

func boolAttr(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// bridgeSTP reads IFLA_BR_STP_STATE of the bridge index in the handle's
// namespace.
func (h *handle) bridgeSTP(index int) (bool, error) {
	ba, err := readBridgeAttrs(h.raw, index)
	return ba.stp, err
}

// setBridgeSTP turns the bridge's STP on or off in the handle's namespace.
func (h *handle) setBridgeSTP(name string, on bool) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	return setBridgeAttr(h.raw, l.Attrs().Index, nl.IFLA_BR_STP_STATE, boolAttr(on))
}
