package qmp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeQMP is a QMP server on a temporary unix socket. Like QEMU it serves
// one client at a time: while a handler runs, further clients are
// accepted by the kernel but get nothing until it returns.
type fakeQMP struct {
	t       *testing.T
	path    string
	ln      *net.UnixListener
	handler func(c *fakeConn)
	wg      sync.WaitGroup

	mu   sync.Mutex
	conn *fakeConn // the client being served
}

// startFake serves handler for each client, one at a time, until the test
// ends. The connection is closed when handler returns.
func startFake(t *testing.T, handler func(c *fakeConn)) *fakeQMP {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("listen %s: %v", path, err)
	}
	f := &fakeQMP{t: t, path: path, ln: ln, handler: handler}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.stop)
	return f
}

func (f *fakeQMP) serve() {
	defer f.wg.Done()
	for {
		nc, err := f.ln.Accept()
		if err != nil {
			return
		}
		c := &fakeConn{t: f.t, nc: nc, r: bufio.NewReader(nc), commands: make(chan string, 1024)}
		f.mu.Lock()
		f.conn = c
		f.mu.Unlock()
		f.handler(c)
		nc.Close()
		f.mu.Lock()
		f.conn = nil
		f.mu.Unlock()
	}
}

func (f *fakeQMP) stop() {
	f.ln.Close()
	f.mu.Lock()
	if f.conn != nil {
		f.conn.nc.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// fakeConn is the server side of one client connection.
type fakeConn struct {
	t        *testing.T
	nc       net.Conn
	r        *bufio.Reader
	commands chan string // names of the commands read, in order
}

type fakeCmd struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

func (c *fakeConn) greet() error {
	return c.sendRaw(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "fake"}, "capabilities": ["oob"]}}`)
}

func (c *fakeConn) sendRaw(line string) error {
	_, err := c.nc.Write([]byte(line + "\r\n"))
	return err
}

func (c *fakeConn) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.sendRaw(string(b))
}

// read returns the next command; errors mean the client went away.
func (c *fakeConn) read() (fakeCmd, error) {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return fakeCmd{}, err
	}
	var cmd fakeCmd
	if err := json.Unmarshal(line, &cmd); err != nil {
		return fakeCmd{}, fmt.Errorf("fake: bad command %q: %w", line, err)
	}
	c.commands <- cmd.Execute
	return cmd, nil
}

func (c *fakeConn) reply(cmd fakeCmd, ret any) error {
	if ret == nil {
		ret = struct{}{}
	}
	return c.send(map[string]any{"return": ret, "id": cmd.ID})
}

func (c *fakeConn) replyErr(cmd fakeCmd, class, desc string) error {
	return c.send(map[string]any{"error": map[string]string{"class": class, "desc": desc}, "id": cmd.ID})
}

func (c *fakeConn) event(name string, data map[string]any) error {
	return c.send(map[string]any{
		"event":     name,
		"data":      data,
		"timestamp": map[string]int64{"seconds": time.Now().Unix(), "microseconds": 0},
	})
}

// negotiate greets and answers qmp_capabilities.
func (c *fakeConn) negotiate() error {
	if err := c.greet(); err != nil {
		return err
	}
	cmd, err := c.read()
	if err != nil {
		return err
	}
	if cmd.Execute != "qmp_capabilities" {
		return fmt.Errorf("fake: got %q before qmp_capabilities", cmd.Execute)
	}
	return c.reply(cmd, nil)
}

// waitClosed blocks until the client disconnects (or the test ends).
func (c *fakeConn) waitClosed() {
	_, _ = c.r.WriteTo(discard{})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// replies answers commands from a table: a value is returned as "return",
// an error of type *CommandError is returned as a QMP error. Unknown
// commands get CommandNotFound. quit replies and hangs up.
func replies(table map[string]any) func(c *fakeConn) {
	return func(c *fakeConn) {
		if err := c.negotiate(); err != nil {
			return
		}
		for {
			cmd, err := c.read()
			if err != nil {
				return
			}
			ret, ok := table[cmd.Execute]
			var cerr *CommandError
			switch {
			case cmd.Execute == "quit":
				_ = c.reply(cmd, nil)
				return
			case !ok:
				err = c.replyErr(cmd, "CommandNotFound", fmt.Sprintf("The command %s has not been found", cmd.Execute))
			case errors.As(asError(ret), &cerr):
				err = c.replyErr(cmd, cerr.Class, cerr.Desc)
			default:
				err = c.reply(cmd, ret)
			}
			if err != nil {
				return
			}
		}
	}
}

func asError(v any) error {
	err, _ := v.(error)
	return err
}
