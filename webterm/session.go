package webterm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
)

// A session (terminal) is one DCUI in a PTY, started for a login's
// WebSocket. It outlives its WebSocket by Options.ReattachWindow: a
// browser that reconnects with the same cookie in time gets it back.

// childEnv is the whole environment of a session's DCUI (with PWD=/,
// which os/exec adds for its Dir): nothing of the server's (its
// environment may hold anything), only what a terminal program needs.
var childEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"TERM=xterm-256color",
	"LANG=C.UTF-8",
	// a DCUI's live heap is a few MB: collecting at half the default
	// growth keeps several sessions' memory down for little CPU
	"GOGC=50",
}

// hangupGrace is how long a DCUI has after SIGHUP before SIGKILL (a
// variable for the tests; New copies it).
var hangupGrace = 5 * time.Second

const (
	// writeTimeout bounds every write to a browser: a client that does
	// not read is dropped (its session waits for a reattach).
	writeTimeout = 10 * time.Second
	// drainWait is how long the output of an exited DCUI may still be
	// read (a grandchild holding the PTY open must not hold the session).
	drainWait = time.Second
)

type terminal struct {
	s     *Server
	id    string // "web/<id>" is the DCUI's console name
	login *login
	cmd   *exec.Cmd
	pty   *os.File
	pid   int
	since time.Time // Options.Now at start
	start time.Time // monotonic

	// guarded by Server.mu:
	conn     *websocket.Conn // the attached browser, nil while detached
	detach   *time.Timer     // the reattach window while detached
	claimed  bool            // a WebSocket is being set up for it
	attached bool            // a browser attached once
	ending   bool            // ended by the server: SIGHUP sent
	why      endReason
	finished bool // reaped and removed

	sizeMu     sync.Mutex // the size, and Setsize against Close (Fd is not safe against Close)
	cols, rows int
	ptyClosed  bool

	// started is closed when the first browser attaches (or the session
	// ends first): until then the output waits in the PTY, so the first
	// frame the DCUI draws is not lost.
	started   chan struct{}
	startOnce sync.Once
	pumped    chan struct{} // the output pump stopped
	exited    chan struct{} // the DCUI was reaped
}

// TTYName is the console name of the session's DCUI (audit log, console
// lock holder).
func (t *terminal) TTYName() string { return "web/" + t.id }

// startTerminal starts a DCUI for l in a PTY of cols x rows. The caller
// has reserved its place (s.mu held no more).
func (s *Server) startTerminal(l *login, cols, rows int) (*terminal, error) {
	t := &terminal{
		s: s, id: randomID(), login: l, since: s.opts.Now(), start: time.Now(),
		cols: cols, rows: rows,
		started: make(chan struct{}), pumped: make(chan struct{}), exited: make(chan struct{}),
	}
	ident, err := json.Marshal(Identity{
		User: l.ident.User, UID: l.ident.UID, Groups: l.ident.Groups,
		Source: l.source, Session: t.id,
	})
	if err != nil {
		return nil, fmt.Errorf("web session: identity: %w", err)
	}
	// The identity goes on a pipe, written and closed before the DCUI
	// starts: never on its command line or in its environment, which
	// other users read in /proc. The pipe holds it (far below its
	// buffer), and the DCUI reads it to EOF.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("web session: identity pipe: %w", err)
	}
	_, werr := pw.Write(ident)
	cerr := pw.Close()
	if err := errors.Join(werr, cerr); err != nil {
		pr.Close()
		return nil, fmt.Errorf("web session: identity pipe: %w", err)
	}
	args := []string{"--web-session-fd", "3"}
	if root := s.opts.Layout.Root; root != "" && root != "/" {
		args = append(args, "--root", root)
	}
	cmd := exec.Command(s.opts.DCUI, args...)
	cmd.Env = childEnv
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{pr} // fd 3
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	pr.Close()
	if err != nil {
		return nil, fmt.Errorf("web session: start %s: %w", s.opts.DCUI, err)
	}
	t.cmd, t.pty, t.pid = cmd, f, cmd.Process.Pid
	s.children.Add(1)
	go t.pump()
	go t.reap()
	s.log.Info("web session start", "user", l.ident.User, "source", l.source, "login", l.id,
		"session", t.id, "pid", t.pid, "size", fmt.Sprintf("%dx%d", cols, rows))
	return t, nil
}

// pump copies the DCUI's output to the attached browser, as binary
// frames; while detached it is dropped (a reattach repaints).
func (t *terminal) pump() {
	defer close(t.pumped)
	<-t.started
	buf := make([]byte, 32<<10)
	for {
		n, err := t.pty.Read(buf)
		if n > 0 {
			t.s.mu.Lock()
			c := t.conn
			t.s.mu.Unlock()
			if c != nil {
				ctx, cancel := context.WithTimeout(t.s.ctx, writeTimeout)
				werr := c.Write(ctx, websocket.MessageBinary, buf[:n])
				cancel()
				if werr != nil {
					t.s.log.Info("web session: browser not reading; detached", "session", t.id, "err", werr)
					t.s.detachConn(t, c)
				}
			}
		}
		if err != nil {
			return // EIO once the DCUI (and anything holding its tty) exited
		}
	}
}

// reap waits for the DCUI, lets the pump drain its last output, closes
// the PTY and removes the session; a session that ended on its own
// (quit, crash) tells its browser so.
func (t *terminal) reap() {
	defer t.s.children.Done()
	err := t.cmd.Wait()
	t.release()
	select {
	case <-t.pumped:
	case <-time.After(drainWait):
	}
	t.sizeMu.Lock()
	t.pty.Close()
	t.ptyClosed = true
	t.sizeMu.Unlock()
	<-t.pumped
	close(t.exited)

	s := t.s
	s.mu.Lock()
	t.finished = true
	if t.detach != nil {
		t.detach.Stop()
	}
	c, ending, why := t.conn, t.ending, t.why
	t.conn = nil
	l := t.login
	for i, x := range l.terms {
		if x == t {
			l.terms = append(l.terms[:i], l.terms[i+1:]...)
			break
		}
	}
	// (one that never had a browser, its upgrade failed, ends alone)
	last := len(l.terms) == 0 && !l.ended && t.attached
	s.mu.Unlock()
	s.writeSessions()

	status := "exit status 0"
	if err != nil {
		status = err.Error()
	}
	loggedOut := false
	if !ending {
		why = endLastTerm
		why.exit = true
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == ExitLoggedOut:
			// the user logged out (or locked) in the DCUI: the login
			// ends, in every tab, not just this session
			why, loggedOut = endLogout, true
		case err != nil:
			why.reason = "the DCUI ended: " + status
		}
	}
	s.log.Info("web session end", "user", l.ident.User, "login", l.id, "session", t.id, "pid", t.pid,
		"status", status, "reason", why.reason, "duration", time.Since(t.start).Round(time.Second).String())
	if last || loggedOut {
		// a login lives as long as its sessions: one whose last DCUI
		// quit, or was not reattached in time, needs a new login (the
		// cookie is dead before the browser hears of the end)
		s.endLogin(l, why)
	}
	if c != nil {
		closeConn(s.ctx, c, why)
	}
}

// endTerminal ends t for why: its browser gets the close code, the DCUI
// SIGHUP (its process group: the DCUI's own children too), SIGKILL after
// hangupGrace; reap does the rest.
func (s *Server) endTerminal(t *terminal, why endReason) {
	s.mu.Lock()
	if t.ending || t.finished {
		s.mu.Unlock()
		return
	}
	t.ending, t.why = true, why
	if t.detach != nil {
		t.detach.Stop()
	}
	c := t.conn
	t.conn = nil
	s.mu.Unlock()
	t.release()
	if c != nil {
		go closeConn(s.ctx, c, why)
	}
	// pty.Start made the DCUI a session and process group leader
	_ = syscall.Kill(-t.pid, syscall.SIGHUP)
	go func() {
		select {
		case <-t.exited:
		case <-time.After(s.hangupGrace):
			s.log.Warn("web session: DCUI still running after SIGHUP; killing it", "session", t.id, "pid", t.pid)
			_ = syscall.Kill(-t.pid, syscall.SIGKILL)
		}
	}()
}

// attach makes c the browser of t, which must be detached.
func (s *Server) attach(t *terminal, c *websocket.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.claimed = false
	if t.ending || t.finished || t.conn != nil {
		return false
	}
	if t.detach != nil {
		t.detach.Stop()
		t.detach = nil
	}
	t.conn = c
	t.attached = true
	t.release()
	return true
}

// release lets the output pump run.
func (t *terminal) release() { t.startOnce.Do(func() { close(t.started) }) }

// detachConn detaches c from t if it is still t's browser, and starts
// the reattach window.
func (s *Server) detachConn(t *terminal, c *websocket.Conn) {
	s.mu.Lock()
	if t.conn != c {
		s.mu.Unlock()
		return
	}
	t.conn = nil
	if !t.ending && !t.finished {
		t.detach = time.AfterFunc(s.opts.ReattachWindow, func() { s.endTerminal(t, endWindow) })
	}
	s.mu.Unlock()
	_ = c.CloseNow()
	s.writeSessions()
	s.log.Info("web session detached", "session", t.id, "window", s.opts.ReattachWindow.String())
}

// resize sets the PTY's size (the DCUI gets SIGWINCH).
func (t *terminal) resize(cols, rows int) error {
	t.sizeMu.Lock()
	defer t.sizeMu.Unlock()
	t.cols, t.rows = cols, rows
	if t.ptyClosed {
		return os.ErrClosed
	}
	return pty.Setsize(t.pty, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
}

// repaint makes the DCUI draw its whole screen again, for a browser that
// reattached (what it drew while detached was dropped): a size change one
// row down and back, each a SIGWINCH that Bubble Tea answers with a full
// redraw.
func (t *terminal) repaint(cols, rows int) {
	t.sizeMu.Lock()
	defer t.sizeMu.Unlock()
	if t.ptyClosed {
		return
	}
	other := rows - 1
	if other < 1 {
		other = rows + 1
	}
	_ = pty.Setsize(t.pty, &pty.Winsize{Cols: uint16(cols), Rows: uint16(other)})
	time.Sleep(50 * time.Millisecond) // let it see the one before the next
	_ = pty.Setsize(t.pty, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	t.cols, t.rows = cols, rows
}

// write sends a browser's key presses to the DCUI.
func (t *terminal) write(p []byte) error {
	_, err := t.pty.Write(p)
	return err
}

// controlMsg is a text frame: JSON control, both ways.
type controlMsg struct {
	T      string `json:"t"`
	Cols   int    `json:"cols,omitempty"`
	Rows   int    `json:"rows,omitempty"`
	In     int    `json:"in,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// sendControl sends m to t's browser, if one is attached.
func (t *terminal) sendControl(ctx context.Context, m controlMsg) {
	t.s.mu.Lock()
	c := t.conn
	t.s.mu.Unlock()
	if c != nil {
		_ = writeControl(ctx, c, m)
	}
}

func writeControl(ctx context.Context, c *websocket.Conn, m controlMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	return c.Write(ctx, websocket.MessageText, b)
}

// closeConn ends a browser's WebSocket for why: the exit message first
// when why says so, then the close frame with its code (none: just
// dropped).
func closeConn(ctx context.Context, c *websocket.Conn, why endReason) {
	if why.exit {
		_ = writeControl(ctx, c, controlMsg{T: "exit", Reason: why.reason})
	}
	if why.code == 0 {
		_ = c.CloseNow()
		return
	}
	_ = c.Close(websocket.StatusCode(why.code), why.reason)
}
