package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// DetachKey ends a console session: Ctrl-] as in telnet and virsh.
const DetachKey = 0x1d

// Console attaches in/out to the VM's serial console until the user types
// DetachKey, in reaches EOF or ctx ends. It never stops the VM. QEMU serves
// the serial socket to one client at a time.
func (m *Manager) Console(ctx context.Context, ref string, in io.Reader, out io.Writer) error {
	vm, err := m.find(ref)
	if err != nil {
		return err
	}
	if m.livePID(vm.Metadata.UID) == 0 {
		return fmt.Errorf("vm %q: console: %w", vm.Metadata.Name, ErrNotRunning)
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	conn, err := d.DialContext(dctx, "unix", m.runPath(vm.Metadata.UID, serialName))
	cancel()
	if err != nil {
		return fmt.Errorf("vm %q: console: %w", vm.Metadata.Name, err)
	}
	defer conn.Close()
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(out, conn)
		done <- err
	}()
	go func() {
		buf := make([]byte, 1024)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				if i := bytes.IndexByte(chunk, DetachKey); i >= 0 {
					if i > 0 {
						conn.Write(chunk[:i])
					}
					done <- nil
					return
				}
				if _, werr := conn.Write(chunk); werr != nil {
					done <- werr
					return
				}
			}
			if err != nil {
				done <- nil // EOF on input: detach
				return
			}
		}
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Logs writes the VM's serial log to w; with follow it keeps writing new
// output until ctx ends.
func (m *Manager) Logs(ctx context.Context, ref string, w io.Writer, follow bool) error {
	vm, err := m.find(ref)
	if err != nil {
		return err
	}
	path := m.SerialLogPath(vm.Metadata.UID)
	capLog(path, serialLogCap)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if !follow {
			return nil // never started: no output yet
		}
		for errors.Is(err, os.ErrNotExist) {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(200 * time.Millisecond):
			}
			f, err = os.Open(path)
		}
	}
	if err != nil {
		return fmt.Errorf("vm %q: logs: %w", vm.Metadata.Name, err)
	}
	defer f.Close()
	for {
		if _, err := io.Copy(w, f); err != nil {
			return err
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
		// the log was trimmed under us: start again from its beginning
		if st, err := f.Stat(); err == nil {
			if pos, _ := f.Seek(0, io.SeekCurrent); pos > st.Size() {
				f.Seek(0, io.SeekStart)
			}
		}
	}
}

// Address is one guest IP address.
type Address struct {
	Interface string `json:"interface" yaml:"interface"`
	Address   string `json:"address" yaml:"address"`
	Source    string `json:"source" yaml:"source"` // agent
}

// ErrNoAddress is returned when no address can be discovered.
var ErrNoAddress = errors.New("no address known")

// IP asks the guest agent for the VM's addresses. Until host networking
// lands, VMs use QEMU user-mode networking, whose guest address is not
// reachable from the host, so without an agent there is nothing to find.
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

// Get returns a VM's manifest with its live status filled in.
func (m *Manager) Get(ctx context.Context, ref string) (*VirtualMachine, *Entry, error) {
	vm, err := m.find(ref)
	if err != nil {
		return nil, nil, err
	}
	e := m.entryFor(vm)
	if pid := m.livePID(vm.Metadata.UID); pid > 0 {
		m.observeLive(ctx, &e, pid)
	}
	vm.Status.Phase, vm.Status.PID = e.Phase, e.PID
	if e.PID == 0 {
		vm.Status.Phase = PhaseStopped
	}
	return vm, &e, nil
}

// Peek returns a VM's entry from its spec and /proc alone, without asking
// QMP: what a command that just changed the VM prints.
func (m *Manager) Peek(ref string) (*Entry, error) {
	vm, err := m.find(ref)
	if err != nil {
		return nil, err
	}
	e := m.entryFor(vm)
	if pid := m.livePID(vm.Metadata.UID); pid > 0 {
		e.Class, e.PID, e.Message = ClassManaged, pid, ""
		e.Phase = vm.Status.Phase
		if argv, err := m.proc.cmdline(pid); err == nil {
			e.Accel = argAccel(argv)
		}
	}
	return &e, nil
}
