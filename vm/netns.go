package vm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A VM's TAPs live in the network namespace its QEMU runs in (a start
// makes them where virt runs, and QEMU inherits that namespace). A NIC
// change made from another namespace would look for, make, rename or
// delete TAPs in the wrong one: a detach said "detached" while the TAP
// stayed on its bridge. So a live NIC change is refused unless virt runs
// in its QEMU's namespace; nothing is changed (QMP included) first.

// ErrOtherNetns is wrapped by a NetnsError: a live NIC change asked from
// another network namespace than the VM's QEMU's.
var ErrOtherNetns = errors.New("not in the network namespace of the VM's QEMU")

// Netns names a network namespace: its kernel identity (net:[INODE]) and,
// where one is known, how a user reaches it.
type Netns struct {
	ID string `json:"id"` // net:[4026531840]
	// Name is its ip netns name (a file under /run/netns), "" if none.
	Name string `json:"name,omitempty"`
	// Host: it is PID 1's namespace (the host's own).
	Host bool `json:"host,omitempty"`
}

func (n Netns) String() string {
	switch {
	case n.Name != "":
		return fmt.Sprintf("%s (ip netns %s)", n.ID, n.Name)
	case n.Host:
		return n.ID + " (the host's)"
	}
	return n.ID
}

// NetnsError is a live NIC change refused: virt runs in namespace Ours,
// the VM's QEMU (PID) in QEMU's. QEMU's is empty when it could not be
// read (Err says why): the change is refused all the same (fail closed).
type NetnsError struct {
	VM, Op     string
	PID        int
	Ours, QEMU Netns
	Err        error
}

func (e *NetnsError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("vm %q: %s: cannot tell the network namespace of its QEMU (pid %d), which holds its TAPs: %v; nothing changed",
			e.VM, e.Op, e.PID, e.Err)
	}
	return fmt.Sprintf("vm %q: %s: %s: virt runs in network namespace %s, the VM's QEMU (pid %d) and its TAPs in %s; nothing changed",
		e.VM, e.Op, ErrOtherNetns, e.Ours, e.PID, e.QEMU)
}

func (e *NetnsError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrOtherNetns, e.Err}
	}
	return []error{ErrOtherNetns}
}

// netnsOf reads the network namespace of pid ("self": this process) from
// the host's /proc, naming it by /run/netns and PID 1.
func (m *Manager) netnsOf(pid string) (Netns, error) {
	id, err := os.Readlink(filepath.Join(m.proc.root, pid, "ns", "net"))
	if err != nil {
		return Netns{}, err
	}
	if !strings.HasPrefix(id, "net:[") {
		return Netns{}, fmt.Errorf("%s/ns/net: %q is no network namespace", pid, id)
	}
	n := Netns{ID: id}
	if host, err := os.Readlink(filepath.Join(m.proc.root, "1", "ns", "net")); err == nil && host == id {
		n.Host = true
	}
	ino, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(id, "net:["), "]"), 10, 64)
	dir := filepath.Join(m.opts.HostRoot, "run", "netns")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		// a name is a bind mount of the namespace: its inode is the
		// namespace's
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(dir, e.Name()), &st) == nil && ino != 0 && st.Ino == ino {
			n.Name = e.Name()
			break
		}
	}
	return n, nil
}

// checkNetns refuses op (a live NIC change) unless virt runs in the
// network namespace of the VM's QEMU pid.
func (m *Manager) checkNetns(name, op string, pid int) error {
	qemu, err := m.netnsOf(strconv.Itoa(pid))
	if err != nil {
		return &NetnsError{VM: name, Op: op, PID: pid, Err: err}
	}
	ours, err := m.netnsOf("self")
	if err != nil {
		return &NetnsError{VM: name, Op: op, PID: pid, QEMU: qemu, Err: fmt.Errorf("our own: %w", err)}
	}
	if ours.ID != qemu.ID {
		return &NetnsError{VM: name, Op: op, PID: pid, Ours: ours, QEMU: qemu}
	}
	return nil
}
