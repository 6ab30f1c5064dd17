package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Address is one guest IP address.
type Address struct {
	Interface string `json:"interface" yaml:"interface"`
	Address   string `json:"address" yaml:"address"`
	Source    string `json:"source" yaml:"source"` // agent
}

// ErrNoAddress is returned when no address can be discovered.
var ErrNoAddress = errors.New("no address known")

// IP finds the VM's addresses: from the guest agent when it answers, else
// by each NIC's MAC in the DHCP leases of our NAT networks and the host's
// neighbour table. A VM without NICs is on user-mode networking, whose
// guest address the host cannot reach: only its agent can tell.
func (m *Manager) IP(ctx context.Context, ref string) ([]Address, error) {
	vm, err := m.find(ref)
	if err != nil {
		return nil, err
	}
	if m.livePID(vm.Metadata.UID) == 0 {
		return nil, fmt.Errorf("vm %q: ip: %w", vm.Metadata.Name, ErrNotRunning)
	}
	addrs, agentErr := agentAddresses(ctx, m.runPath(vm.Metadata.UID, agentSockName))
	if agentErr == nil {
		return addrs, nil
	}
	for i, n := range vm.Spec.Network {
		found, source, err := m.opts.Net.Addresses(ctx, n.MAC)
		if err != nil {
			m.log.Debug("address lookup failed", "vm", vm.Metadata.Name, "mac", n.MAC, "err", err)
			continue
		}
		for _, a := range found {
			addrs = append(addrs, Address{Interface: fmt.Sprintf("net%d", i), Address: a, Source: source})
		}
	}
	if len(addrs) > 0 {
		return addrs, nil
	}
	if len(vm.Spec.Network) == 0 {
		return nil, fmt.Errorf("vm %q: ip: %w: the guest agent did not answer (%v), and on user-mode networking the guest is not reachable from the host", vm.Metadata.Name, ErrNoAddress, agentErr)
	}
	return nil, fmt.Errorf("vm %q: ip: %w: no guest agent (%v), no DHCP lease and no neighbour entry for its MACs yet", vm.Metadata.Name, ErrNoAddress, agentErr)
}

func agentAddresses(ctx context.Context, sock string) ([]Address, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte(`{"execute":"guest-network-get-interfaces"}` + "\n")); err != nil {
		return nil, err
	}
	var reply struct {
		Return []struct {
			Name string `json:"name"`
			IPs  []struct {
				Addr string `json:"ip-address"`
			} `json:"ip-addresses"`
		} `json:"return"`
		Error *struct {
			Desc string `json:"desc"`
		} `json:"error"`
	}
	if err := json.NewDecoder(conn).Decode(&reply); err != nil {
		return nil, err
	}
	if reply.Error != nil {
		return nil, errors.New(reply.Error.Desc)
	}
	var out []Address
	for _, i := range reply.Return {
		if i.Name == "lo" {
			continue
		}
		for _, ip := range i.IPs {
			if !strings.HasPrefix(ip.Addr, "fe80:") {
				out = append(out, Address{Interface: i.Name, Address: ip.Addr, Source: "agent"})
			}
		}
	}
	if len(out) == 0 {
		return nil, ErrNoAddress
	}
	return out, nil
}
