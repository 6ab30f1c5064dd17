package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gqmp "github.com/digitalocean/go-qemu/qmp"
)

// go-qemu's typed layers (raw.Monitor, qemu.Domain) run on top of Monitor.
var _ gqmp.Monitor = (*Monitor)(nil)

// Monitor is a connection to a QMP socket. It is safe for concurrent use:
// commands may be in flight together, and replies are matched by id.
//
// One reader goroutine per Monitor reads every line QEMU sends, without a
// size limit, routes replies to their callers and drains asynchronous
// events, so an event nobody reads can never hold up a reply. The
// goroutine ends when the Monitor is closed.
type Monitor struct {
	path     string
	opts     Options
	log      *slog.Logger
	conn     net.Conn
	greeting Greeting
	done     chan struct{} // closed when the reader goroutine has exited

	writeMu sync.Mutex // one command line on the wire at a time

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan reply
	subs    map[*subscription]struct{}
	closed  bool
	cause   error // why the monitor closed; always wraps ErrClosed

	dropped atomic.Uint64
}

type reply struct {
	msg message
	raw []byte
}

type subscription struct {
	ch   chan gqmp.Event
	stop func() bool // stops the context.AfterFunc that unsubscribes
}

// Dial connects to the QMP socket at socketPath, reads QEMU's greeting and
// negotiates capabilities, all within ctx's deadline (opts.Timeout if ctx
// has none).
//
// Errors wrap ErrUnavailable when nothing listens on the socket, ErrBusy
// when the socket accepts but sends no greeting in time (another client
// holds it), ErrTimeout when capabilities negotiation gets no reply, and
// ErrClosed when QEMU hangs up during the handshake.
func Dial(ctx context.Context, socketPath string, opts Options) (*Monitor, error) {
	opts = opts.withDefaults()
	conn, dec, greeting, err := handshake(ctx, socketPath, opts)
	if err != nil {
		return nil, err
	}
	m := &Monitor{
		path:     socketPath,
		opts:     opts,
		log:      opts.Logger.With("socket", socketPath),
		conn:     conn,
		greeting: greeting,
		done:     make(chan struct{}),
		pending:  make(map[uint64]chan reply),
		subs:     make(map[*subscription]struct{}),
	}
	go m.readLoop(dec)
	return m, nil
}

// Greeting returns what QEMU announced on connect.
func (m *Monitor) Greeting() Greeting { return m.greeting }

// Closed reports whether the Monitor is closed: by Close, by QEMU hanging
// up, or after a command that missed its deadline. A closed Monitor fails
// every command; a caller that must still reach QEMU dials anew.
func (m *Monitor) Closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// DroppedEvents counts events discarded because a subscriber's buffer (see
// Events) was full.
func (m *Monitor) DroppedEvents() uint64 { return m.dropped.Load() }

// Close closes the connection and waits for the reader goroutine to exit.
// Commands in flight fail with ErrClosed and event channels are closed.
// It is safe to call more than once.
func (m *Monitor) Close() error {
	m.fail(ErrClosed)
	<-m.done
	return nil
}

// fail marks the monitor closed for the given reason (the first one wins)
// and closes the connection, which ends the reader goroutine.
func (m *Monitor) fail(cause error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.cause = cause
	m.mu.Unlock()
	_ = m.conn.Close()
}

func (m *Monitor) closedErr(command string) error {
	m.mu.Lock()
	cause := m.cause
	m.mu.Unlock()
	if cause == nil {
		cause = ErrClosed
	}
	return fmt.Errorf("qmp %s: %s: %w", m.path, command, cause)
}

func (m *Monitor) readLoop(dec *json.Decoder) {
	defer close(m.done)
	var err error
	for {
		var raw json.RawMessage
		if err = dec.Decode(&raw); err != nil {
			break
		}
		var msg message
		if jerr := json.Unmarshal(raw, &msg); jerr != nil {
			m.log.Debug("qmp: ignoring unexpected message", "error", jerr)
			continue
		}
		if msg.Event != "" {
			m.dispatchEvent(msg.Event, raw)
			continue
		}
		m.dispatchReply(msg, raw)
	}

	m.mu.Lock()
	if !m.closed {
		m.closed = true
		if isConnGone(err) {
			m.cause = fmt.Errorf("%w: %w", ErrClosed, err)
		} else {
			m.cause = fmt.Errorf("%w: reading: %w", ErrClosed, err)
		}
	}
	for s := range m.subs {
		s.stop()
		close(s.ch)
	}
	m.subs = nil
	m.mu.Unlock()
	_ = m.conn.Close()
}

func (m *Monitor) dispatchReply(msg message, raw []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, err := strconv.ParseUint(string(msg.ID), 10, 64)
	if err != nil {
		// QEMU omits the id only when it could not parse the command; with
		// a single command in flight the reply can only be for it.
		if len(m.pending) != 1 {
			m.log.Debug("qmp: dropping reply without a usable id", "id", string(msg.ID))
			return
		}
		for k := range m.pending {
			id = k
		}
	}
	ch, ok := m.pending[id]
	if !ok {
		m.log.Debug("qmp: dropping reply for unknown id", "id", id)
		return
	}
	delete(m.pending, id)
	ch <- reply{msg: msg, raw: raw} // buffered for exactly this reply
}

func (m *Monitor) dispatchEvent(name string, raw []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.subs) == 0 {
		return
	}
	var e gqmp.Event
	if err := json.Unmarshal(raw, &e); err != nil {
		m.log.Debug("qmp: ignoring undecodable event", "event", name, "error", err)
		return
	}
	for s := range m.subs {
		pushDropOldest(s.ch, e, func() { m.dropped.Add(1) })
	}
}

// Execute runs a QMP command and decodes its "return" value into result
// (which may be nil to ignore it). args is marshalled as "arguments"; nil
// sends none.
//
// ctx bounds the whole exchange (opts.Timeout if it has no deadline). When
// it ends after the command was sent but before the reply, the error wraps
// ErrTimeout and context.DeadlineExceeded (or just context.Canceled) and
// the Monitor is closed: the command may still take effect, and a QEMU that
// misses deadlines is not one to keep talking to. A ctx already done when
// Execute is called only fails that call.
// QEMU errors are returned as *CommandError; a connection that ends before
// the reply gives an error wrapping ErrClosed.
func (m *Monitor) Execute(ctx context.Context, command string, args, result any) error {
	rep, _, err := m.exec(ctx, command, args)
	if err != nil {
		return err
	}
	return m.decodeReturn(command, rep, result)
}

func (m *Monitor) decodeReturn(command string, rep reply, result any) error {
	if result == nil || len(rep.msg.Return) == 0 {
		return nil
	}
	if err := json.Unmarshal(rep.msg.Return, result); err != nil {
		return fmt.Errorf("qmp %s: %s: decoding reply: %w", m.path, command, err)
	}
	return nil
}

// exec sends one command and waits for its reply. sent reports whether the
// command was completely written, which Quit needs to tell "QEMU hung up
// because it quit" from "QEMU was already gone".
func (m *Monitor) exec(ctx context.Context, command string, args any) (rep reply, sent bool, err error) {
	return m.execOOB(ctx, command, args, nil)
}

// execOOB is exec with ancillary data (SCM_RIGHTS) sent along with the
// command's first byte; nil sends none.
func (m *Monitor) execOOB(ctx context.Context, command string, args any, oob []byte) (rep reply, sent bool, err error) {
	if command == "" {
		return reply{}, false, fmt.Errorf("qmp %s: empty command name", m.path)
	}
	ctx, cancel := withDefaultDeadline(ctx, m.opts.Timeout)
	defer cancel()

	start := time.Now()
	defer func() {
		if err != nil {
			m.log.Debug("qmp command failed", "command", command, "duration", time.Since(start), "error", err)
		} else {
			m.log.Debug("qmp command", "command", command, "duration", time.Since(start))
		}
	}()

	var rawArgs json.RawMessage
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return reply{}, false, fmt.Errorf("qmp %s: %s: encoding arguments: %w", m.path, command, err)
		}
		if string(b) != "null" {
			rawArgs = b
		}
	}

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return reply{}, false, m.closedErr(command)
	}
	m.nextID++
	id := m.nextID
	ch := make(chan reply, 1)
	m.pending[id] = ch
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.pending, id)
		m.mu.Unlock()
	}()

	line, err := json.Marshal(request{Execute: command, Arguments: rawArgs, ID: id})
	if err != nil {
		return reply{}, false, fmt.Errorf("qmp %s: %s: encoding command: %w", m.path, command, err)
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent: the stream is still in sync.
		return reply{}, false, fmt.Errorf("qmp %s: %s: %w", m.path, command, err)
	}
	m.writeMu.Lock()
	deadline, _ := ctx.Deadline()
	_ = m.conn.SetWriteDeadline(deadline)
	n, werr := m.write(append(line, '\n'), oob)
	m.writeMu.Unlock()
	if werr != nil {
		if isTimeout(werr) && n == 0 {
			return reply{}, false, fmt.Errorf("qmp %s: %s: sending: %w: %w", m.path, command, ErrTimeout, context.DeadlineExceeded)
		}
		if isTimeout(werr) {
			m.fail(fmt.Errorf("%w after %s timed out", ErrClosed, command))
			return reply{}, false, fmt.Errorf("qmp %s: %s: sending: %w: %w", m.path, command, ErrTimeout, context.DeadlineExceeded)
		}
		m.fail(fmt.Errorf("%w: sending %s: %w", ErrClosed, command, werr))
		return reply{}, false, m.closedErr(command)
	}

	select {
	case rep = <-ch:
	case <-m.done:
		select {
		case rep = <-ch: // delivered just before the connection ended
		default:
			return reply{}, true, m.closedErr(command)
		}
	case <-ctx.Done():
		select {
		case rep = <-ch:
		default:
			m.fail(fmt.Errorf("%w after %s: %v", ErrClosed, command, ctx.Err()))
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return reply{}, true, fmt.Errorf("qmp %s: %s: no reply: %w: %w", m.path, command, ErrTimeout, ctx.Err())
			}
			return reply{}, true, fmt.Errorf("qmp %s: %s: %w", m.path, command, ctx.Err())
		}
	}
	if rep.msg.Error != nil {
		return rep, true, fmt.Errorf("qmp %s: %w", m.path,
			&CommandError{Command: command, Class: rep.msg.Error.Class, Desc: rep.msg.Error.Desc})
	}
	return rep, true, nil
}

// Events returns a channel of the asynchronous events QEMU sends on this
// connection, from now on. It implements go-qemu's qmp.Monitor. The channel
// holds up to Options.EventBuffer events; when it is full the oldest is
// dropped (see DroppedEvents). It is closed when ctx ends or the Monitor
// closes. Prefer DialEvents, which keeps events off the command connection.
func (m *Monitor) Events(ctx context.Context) (<-chan gqmp.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("qmp %s: events: %w", m.path, m.cause)
	}
	s := &subscription{ch: make(chan gqmp.Event, m.opts.EventBuffer)}
	m.subs[s] = struct{}{}
	s.stop = context.AfterFunc(ctx, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.subs[s]; ok {
			delete(m.subs, s)
			close(s.ch)
		}
	})
	return s.ch, nil
}

// Connect implements go-qemu's qmp.Monitor. A Monitor is connected by
// Dial, so Connect only reports whether it still is; a closed Monitor is
// not reopened (Dial again).
func (m *Monitor) Connect() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("qmp %s: connect: %w", m.path, m.cause)
	}
	return nil
}

// Disconnect implements go-qemu's qmp.Monitor; it is Close.
func (m *Monitor) Disconnect() error { return m.Close() }

// Run implements go-qemu's qmp.Monitor: command is a JSON object with
// "execute" and optional "arguments"; any "id" is replaced by the Monitor's
// own. It returns QEMU's whole reply line. It is bounded by Options.Timeout
// since the interface carries no context; QEMU errors come back as
// *CommandError.
func (m *Monitor) Run(command []byte) ([]byte, error) {
	var req struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(command, &req); err != nil {
		return nil, fmt.Errorf("qmp %s: run: decoding command: %w", m.path, err)
	}
	var args any
	if len(req.Arguments) > 0 {
		args = req.Arguments
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.Timeout)
	defer cancel()
	rep, _, err := m.exec(ctx, req.Execute, args)
	if err != nil {
		return nil, err
	}
	return rep.raw, nil
}
