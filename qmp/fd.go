package qmp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
)

// ErrNoFDPassing: the connection cannot carry file descriptors (it is not
// a unix socket).
var ErrNoFDPassing = errors.New("connection cannot pass file descriptors")

// write sends one command line; oob, when set, travels with its first
// byte (QEMU takes the descriptors it receives with a command as that
// command's). A short write of the line with oob is finished plainly:
// the descriptors went with the first part.
func (m *Monitor) write(line, oob []byte) (int, error) {
	if oob == nil {
		return m.conn.Write(line)
	}
	uc, ok := m.conn.(*net.UnixConn)
	if !ok {
		return 0, ErrNoFDPassing
	}
	n, _, err := uc.WriteMsgUnix(line, oob, nil)
	if err != nil || n == len(line) {
		return n, err
	}
	k, err := m.conn.Write(line[n:])
	return n + k, err
}

// rightsFor is the SCM_RIGHTS message carrying f's descriptor. The
// descriptor is read without os.File.Fd, which would switch a
// non-blocking file to blocking mode.
func rightsFor(f *os.File) ([]byte, error) {
	if f == nil {
		return nil, errors.New("no file")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var oob []byte
	if err := rc.Control(func(fd uintptr) { oob = syscall.UnixRights(int(fd)) }); err != nil {
		return nil, err
	}
	return oob, nil
}

// ExecuteWithFD runs command like Execute, passing f's file descriptor
// to QEMU with it over the unix socket (SCM_RIGHTS). QEMU gets its own
// copy: the caller still owns f and may close it once this returns.
// Only commands that take a descriptor (getfd, add-fd) use it; QEMU
// closes one that nothing claims.
func (m *Monitor) ExecuteWithFD(ctx context.Context, command string, args, result any, f *os.File) error {
	oob, err := rightsFor(f)
	if err != nil {
		return fmt.Errorf("qmp %s: %s: file descriptor: %w", m.path, command, err)
	}
	rep, _, err := m.execOOB(ctx, command, args, oob)
	// the descriptor must stay open until the kernel has taken its copy
	// (sendmsg returned)
	runtime.KeepAlive(f)
	if err != nil {
		return err
	}
	return m.decodeReturn(command, rep, result)
}

// SendFD hands f to QEMU under name (getfd); later commands name it, as
// in the migration URI "fd:" + name. A second SendFD of a name replaces
// the first descriptor.
func (m *Monitor) SendFD(ctx context.Context, name string, f *os.File) error {
	if name == "" {
		return fmt.Errorf("qmp %s: getfd: empty fd name", m.path)
	}
	return m.ExecuteWithFD(ctx, "getfd", map[string]string{"fdname": name}, nil, f)
}

// CloseFD closes the descriptor QEMU holds under name (closefd).
func (m *Monitor) CloseFD(ctx context.Context, name string) error {
	return m.Execute(ctx, "closefd", map[string]string{"fdname": name}, nil)
}
