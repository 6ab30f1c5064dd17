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
	"os/user"
	"strings"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/qmp"
)

// DetachKey ends a console session: Ctrl-] as in telnet and virsh.
const DetachKey = 0x1d

// ErrConsoleBusy is returned when another client holds a VM's serial
// console: QEMU serves its socket to one client at a time, and a second
// one would be connected to nothing.
var ErrConsoleBusy = errors.New("console busy")

// ConsoleHolder says who holds a VM's console, as far as known.
type ConsoleHolder struct {
	PID   int       `json:"pid"`
	User  string    `json:"user,omitempty"`
	TTY   string    `json:"tty,omitempty"`
	Since time.Time `json:"since"`
}

// ConsoleBusyError names the holder of a busy console; Holder is nil when
// the client is not a virtcon process (socat, an older virt).
type ConsoleBusyError struct {
	VM     string
	Holder *ConsoleHolder
}

func (e *ConsoleBusyError) Error() string {
	if h := e.Holder; h != nil {
		who := h.User
		if who == "" {
			who = "a virtcon process"
		}
		if h.TTY != "" {
			who += " on " + h.TTY
		}
		return fmt.Sprintf("vm %q: %v: attached by %s (pid %d) since %s", e.VM, ErrConsoleBusy, who, h.PID, h.Since.Local().Format("15:04:05"))
	}
	return fmt.Sprintf("vm %q: %v: another client is attached to its serial socket", e.VM, ErrConsoleBusy)
}

// Is makes errors.Is(err, ErrConsoleBusy) true.
func (e *ConsoleBusyError) Is(target error) bool { return target == ErrConsoleBusy }

// Console attaches in/out to the VM's serial console until the user types
// DetachKey, in reaches EOF or ctx ends. It never stops the VM. Before
// anything is attached it fails with ErrNotRunning or a *ConsoleBusyError;
// attached, if not nil, is called once the console is connected (where a
// face prints "Connected").
func (m *Manager) Console(ctx context.Context, ref string, in io.Reader, out io.Writer, attached func(vm *VirtualMachine)) error {
	vm, err := m.find(ref)
	if err != nil {
		return err
	}
	uid, name := vm.Metadata.UID, vm.Metadata.Name
	if m.livePID(uid) == 0 {
		return fmt.Errorf("vm %q: console: %w", name, ErrNotRunning)
	}
	// one virtcon client at a time, by a lock that dies with its holder
	lctx, cancel := context.WithCancel(ctx)
	cancel() // one try: a held console is busy, not something to wait for
	lock, err := flock.Acquire(lctx, m.runPath(uid, consoleLockName))
	if errors.Is(err, flock.ErrLocked) {
		return &ConsoleBusyError{VM: name, Holder: readConsoleHolder(m.runPath(uid, consoleHolderName))}
	}
	if err != nil {
		return fmt.Errorf("vm %q: console: %w", name, err)
	}
	defer lock.Release()
	// and no client of anyone else's: QEMU knows whether its socket is
	// taken (a second connection would be accepted and never served)
	if busy, err := m.serialConnected(ctx, uid); err != nil {
		// QMP is retried while busy (qmpDo); past that, attach, but say
		// that a client of someone else's could not be ruled out
		m.log.Warn("console: could not ask QEMU whether another client holds the console; attaching anyway", "vm", name, "err", err)
	} else if busy {
		return &ConsoleBusyError{VM: name}
	}
	holderPath := m.runPath(uid, consoleHolderName)
	if b, err := json.Marshal(currentHolder()); err == nil {
		if err := atomicfile.WriteVolatile(holderPath, b, 0o600); err != nil {
			m.log.Debug("console holder record not written", "vm", name, "err", err)
		}
		defer os.Remove(holderPath)
	}
	var d net.Dialer
	dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
	conn, err := d.DialContext(dctx, "unix", m.runPath(uid, serialName))
	dcancel()
	if err != nil {
		return fmt.Errorf("vm %q: console: %w", name, err)
	}
	defer conn.Close()
	if attached != nil {
		attached(vm)
	}
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

// serialConnected asks QEMU whether a client holds the serial socket: a
// listening socket chardev's filename reads "disconnected:..." while free.
func (m *Manager) serialConnected(ctx context.Context, uid string) (bool, error) {
	var devs []struct {
		Label    string `json:"label"`
		Filename string `json:"filename"`
	}
	err := m.qmpDo(ctx, uid, func(ctx context.Context, mon *qmp.Monitor) error {
		return mon.Execute(ctx, "query-chardev", nil, &devs)
	})
	if err != nil {
		return false, err
	}
	for _, d := range devs {
		if d.Label == serialChardev {
			return !strings.HasPrefix(d.Filename, "disconnected:"), nil
		}
	}
	return false, fmt.Errorf("no chardev %q", serialChardev)
}

// currentHolder describes this process for a console holder record.
func currentHolder() ConsoleHolder {
	h := ConsoleHolder{PID: os.Getpid(), Since: time.Now()}
	if u, err := user.Current(); err == nil {
		h.User = u.Username
	}
	if su := os.Getenv("SUDO_USER"); su != "" && su != h.User {
		h.User = su + " (as " + h.User + ")"
	}
	if tty, err := os.Readlink("/proc/self/fd/0"); err == nil && strings.HasPrefix(tty, "/dev/") {
		h.TTY = strings.TrimPrefix(tty, "/dev/")
	}
	return h
}

// readConsoleHolder reads a holder record; nil when there is none or its
// process is gone (the record is advisory, the lock is the truth).
func readConsoleHolder(path string) *ConsoleHolder {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var h ConsoleHolder
	if json.Unmarshal(b, &h) != nil || h.PID <= 0 || syscall.Kill(h.PID, 0) == syscall.ESRCH {
		return nil
	}
	return &h
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
