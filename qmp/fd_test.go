package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// fdServer negotiates, then reads each command with its ancillary data
// (a plain read would drop the descriptors) and hands both to handle.
func fdServer(handle func(c *fakeConn, cmd fakeCmd, fds []int)) func(c *fakeConn) {
	return func(c *fakeConn) {
		if err := c.negotiate(); err != nil {
			return
		}
		uc := c.nc.(*net.UnixConn)
		for {
			buf, oob := make([]byte, 4096), make([]byte, syscall.CmsgSpace(4*4))
			n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			var fds []int
			msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				c.t.Errorf("fake: control message: %v", err)
				return
			}
			for _, msg := range msgs {
				got, err := syscall.ParseUnixRights(&msg)
				if err != nil {
					c.t.Errorf("fake: unix rights: %v", err)
					return
				}
				fds = append(fds, got...)
			}
			for _, line := range bytes.Split(bytes.TrimSpace(buf[:n]), []byte("\n")) {
				var cmd fakeCmd
				if err := json.Unmarshal(line, &cmd); err != nil {
					c.t.Errorf("fake: bad command %q: %v", line, err)
					return
				}
				handle(c, cmd, fds)
				fds = nil // the descriptors came with the first command
			}
		}
	}
}

func TestSendFD(t *testing.T) {
	type got struct {
		cmd    string
		fdname string
		fds    int
	}
	seen := make(chan got, 4)
	f := startFake(t, fdServer(func(c *fakeConn, cmd fakeCmd, fds []int) {
		var args struct {
			FDName string `json:"fdname"`
		}
		_ = json.Unmarshal(cmd.Arguments, &args)
		seen <- got{cmd.Execute, args.FDName, len(fds)}
		for _, fd := range fds {
			// prove it is the caller's file: write through it, as QEMU's
			// migration does
			syscall.Write(fd, []byte("QEVM from the monitor"))
			syscall.Close(fd)
		}
		_ = c.reply(cmd, nil)
	}))
	m := dialT(t, f.path, Options{})
	ctx := context.Background()

	path := filepath.Join(t.TempDir(), "state")
	file, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := m.SendFD(ctx, "state", file); err != nil {
		t.Fatalf("SendFD: %v", err)
	}
	if g := <-seen; g != (got{"getfd", "state", 1}) {
		t.Errorf("the monitor got %+v; want getfd of fdname state with one descriptor", g)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "QEVM from the monitor" {
		t.Errorf("the file holds %q (%v); want what the monitor wrote through the passed descriptor", b, err)
	}

	// a plain command after it carries no descriptor
	if err := m.Execute(ctx, "query-status", nil, nil); err != nil {
		t.Fatalf("query-status: %v", err)
	}
	if g := <-seen; g != (got{"query-status", "", 0}) {
		t.Errorf("the monitor got %+v; want query-status without a descriptor", g)
	}
}

func TestSendFDRefusesBadInput(t *testing.T) {
	seen := make(chan string, 4)
	f := startFake(t, fdServer(func(c *fakeConn, cmd fakeCmd, fds []int) {
		seen <- cmd.Execute
		_ = c.reply(cmd, nil)
	}))
	m := dialT(t, f.path, Options{})
	ctx := context.Background()
	file, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	file.Close()
	for name, call := range map[string]func() error{
		"nil file":    func() error { return m.SendFD(ctx, "x", nil) },
		"closed file": func() error { return m.SendFD(ctx, "x", file) },
		"empty name":  func() error { return m.SendFD(ctx, "", os.Stdin) },
	} {
		if err := call(); err == nil {
			t.Errorf("%s: got no error", name)
		}
	}
	// nothing reached the monitor, and the connection still works
	if err := m.Execute(ctx, "query-status", nil, nil); err != nil {
		t.Fatalf("query-status: %v", err)
	}
	if c := <-seen; c != "query-status" {
		t.Errorf("the monitor's first command was %q; want query-status (the refused calls sent nothing)", c)
	}
}

func TestQueryMigrate(t *testing.T) {
	f := startFake(t, replies(map[string]any{
		"query-migrate": map[string]any{"status": "completed", "total-time": 56,
			"ram": map[string]any{"transferred": 68617234, "total": 268967936, "remaining": 0, "duplicate": 49054, "normal": 16612}},
		"migrate":                map[string]any{},
		"migrate-incoming":       map[string]any{},
		"migrate-set-parameters": map[string]any{},
		"migrate_cancel":         map[string]any{},
	}))
	m := dialT(t, f.path, Options{})
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Migrate":               func() error { return m.Migrate(ctx, "fd:state") },
		"MigrateIncoming":       func() error { return m.MigrateIncoming(ctx, "fd:state") },
		"SetMigrationBandwidth": func() error { return m.SetMigrationBandwidth(ctx, 1<<40) },
		"MigrateCancel":         func() error { return m.MigrateCancel(ctx) },
	} {
		if err := call(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	info, err := m.QueryMigrate(ctx)
	if err != nil {
		t.Fatalf("QueryMigrate: %v", err)
	}
	if !info.Done() || info.Status != MigrationCompleted || info.RAM == nil || info.RAM.Transferred != 68617234 || info.TotalTime != 56 {
		t.Errorf("QueryMigrate: got %+v (ram %+v); want completed, 68617234 bytes in 56 ms", info, info.RAM)
	}
	for _, s := range []string{"", "none", "setup", "active", "cancelling"} {
		if (MigrationInfo{Status: s}).Done() {
			t.Errorf("status %q: Done() = true; want false", s)
		}
	}
}
