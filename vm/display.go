package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// ErrNoDisplay is what asking for the display of a VM without one is
// (errors.Is): bad input, like ErrInvalid.
var ErrNoDisplay = errors.New("the VM has no display")

// NoDisplayError is a display asked of a VM whose spec.display is not
// vnc (Display: what it is, "" or none).
type NoDisplayError struct{ Name, Display string }

func (e *NoDisplayError) Error() string {
	d := e.Display
	if d == "" {
		d = "unset"
	}
	return fmt.Sprintf("vm %q: display: %v (spec.display is %s)", e.Name, ErrNoDisplay, d)
}

// Is makes errors.Is(err, ErrNoDisplay) and errors.Is(err, ErrInvalid) true.
func (e *NoDisplayError) Is(target error) bool { return target == ErrNoDisplay || target == ErrInvalid }

// DisplayInfo is where a VM's display is served: QEMU's VNC server on a
// unix socket under the VM's run dir, never on a TCP port (it has no TLS
// or password configured; the socket is root's, reached over SSH).
type DisplayInfo struct {
	Name string `json:"name" yaml:"name"`
	UID  string `json:"uid" yaml:"uid"`
	// Type is the protocol: vnc.
	Type string `json:"type" yaml:"type"`
	// Socket is the VNC server's unix socket.
	Socket string `json:"socket" yaml:"socket"`
	// Serving: the VM runs and its QEMU serves the socket.
	Serving bool `json:"serving" yaml:"serving"`
	// RestartNeeded: the VM runs, started before spec.display was vnc,
	// so its QEMU has no display until it is stopped and started.
	RestartNeeded bool `json:"restartNeeded,omitempty" yaml:"restartNeeded,omitempty"`
}

// SSHTunnel is the ssh command that forwards localPort on the machine it
// runs on to the VNC socket on target (user@host of this host), for a
// viewer there to open localhost:localPort.
func (d DisplayInfo) SSHTunnel(target string, localPort int) string {
	return "ssh -N -L " + strconv.Itoa(localPort) + ":" + d.Socket + " " + target
}

// Display says where the VM's display is (spec.display: vnc); a VM
// without one is a *NoDisplayError.
func (m *Manager) Display(ctx context.Context, ref string) (*DisplayInfo, error) {
	vm, err := m.find(ref)
	if err != nil {
		return nil, err
	}
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	if vm.Spec.Display != DisplayVNC {
		return nil, &NoDisplayError{Name: name, Display: vm.Spec.Display}
	}
	d := &DisplayInfo{Name: name, UID: uid, Type: DisplayVNC, Socket: m.runPath(uid, vncSockName)}
	if m.livePID(uid) > 0 {
		st, err := os.Stat(d.Socket)
		d.Serving = err == nil && st.Mode()&os.ModeSocket != 0
		d.RestartNeeded = !d.Serving
	}
	return d, nil
}
