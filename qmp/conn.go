package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	gqmp "github.com/digitalocean/go-qemu/qmp"
)

// Defaults applied to zero Options fields.
const (
	DefaultTimeout     = 2 * time.Second
	DefaultEventBuffer = 64
)

// Options configure Dial and DialEvents. The zero value is usable.
type Options struct {
	// Timeout bounds the handshake and each command whose context has no
	// deadline, and every Run call (go-qemu's interface has no context).
	// Zero means DefaultTimeout.
	Timeout time.Duration
	// Logger receives debug records with command names and durations,
	// never argument values. Nil discards.
	Logger *slog.Logger
	// EventBuffer is how many events are buffered per subscriber before the
	// oldest is dropped. Zero or less means DefaultEventBuffer.
	EventBuffer int
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = DefaultEventBuffer
	}
	return o
}

// Greeting is what QEMU announces when a client connects.
type Greeting struct {
	Version      gqmp.Version
	Capabilities []string
}

// withDefaultDeadline gives ctx a deadline of d unless it already has one,
// so no exchange with QEMU can wait forever.
func withDefaultDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// message is any line QEMU sends after the greeting: a reply or an event.
type message struct {
	Event  string          `json:"event"`
	ID     json.RawMessage `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// request is one command line sent to QEMU.
type request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	ID        uint64          `json:"id"`
}

// capabilitiesID is the id of the handshake command; Monitor ids start at 1.
const capabilitiesID = 0

var longAgo = time.Unix(1, 0)

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// isConnGone reports errors meaning the peer (or we) closed the connection.
func isConnGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// handshake dials socketPath, reads the greeting and negotiates
// capabilities, all under ctx (given opts.Timeout if it has no deadline).
// On success the connection has no deadline set and dec is positioned after
// the capabilities reply.
func handshake(ctx context.Context, socketPath string, opts Options) (net.Conn, *json.Decoder, Greeting, error) {
	ctx, cancel := withDefaultDeadline(ctx, opts.Timeout)
	defer cancel()
	start := time.Now()

	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, Greeting{}, fmt.Errorf("qmp %s: dial: %w", socketPath, ctx.Err())
		}
		if errors.Is(err, syscall.EAGAIN) {
			// QEMU listens with a tiny backlog and accepts nobody while a
			// client holds the monitor, so the queue fills quickly.
			return nil, nil, Greeting{}, fmt.Errorf("qmp %s: %w: connection queue full: another client holds the socket: %w",
				socketPath, ErrBusy, err)
		}
		return nil, nil, Greeting{}, fmt.Errorf("qmp %s: %w: %w", socketPath, ErrUnavailable, err)
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, nil, Greeting{}, fmt.Errorf("qmp %s: %w", socketPath, err)
	}
	// Cancellation without a deadline must also abort blocked reads.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(longAgo) })
	defer stop()

	dec := json.NewDecoder(conn)
	var g struct {
		QMP *struct {
			Version      gqmp.Version `json:"version"`
			Capabilities []string     `json:"capabilities"`
		} `json:"QMP"`
	}
	if err := dec.Decode(&g); err != nil {
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return nil, nil, Greeting{}, fmt.Errorf("qmp %s: waiting for greeting: %w", socketPath, ctx.Err())
		case isTimeout(err):
			return nil, nil, Greeting{}, fmt.Errorf("qmp %s: %w: no QMP greeting within %s: another client may hold the socket",
				socketPath, ErrBusy, time.Since(start).Round(time.Millisecond))
		case isConnGone(err):
			return nil, nil, Greeting{}, fmt.Errorf("qmp %s: before greeting: %w: %w", socketPath, ErrClosed, err)
		default:
			return nil, nil, Greeting{}, fmt.Errorf("qmp %s: reading greeting: %w", socketPath, err)
		}
	}
	if g.QMP == nil {
		return nil, nil, Greeting{}, fmt.Errorf("qmp %s: not a QMP greeting", socketPath)
	}
	greeting := Greeting{Version: g.QMP.Version, Capabilities: g.QMP.Capabilities}

	const capsCmd = "qmp_capabilities"
	fail := func(err error) error {
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return fmt.Errorf("qmp %s: %s: %w", socketPath, capsCmd, ctx.Err())
		case isTimeout(err):
			return fmt.Errorf("qmp %s: %s: %w: %w", socketPath, capsCmd, ErrTimeout, context.DeadlineExceeded)
		case isConnGone(err):
			return fmt.Errorf("qmp %s: %s: %w: %w", socketPath, capsCmd, ErrClosed, err)
		default:
			return fmt.Errorf("qmp %s: %s: %w", socketPath, capsCmd, err)
		}
	}
	line, _ := json.Marshal(request{Execute: capsCmd, ID: capabilitiesID})
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return nil, nil, Greeting{}, fail(err)
	}
	for {
		var msg message
		if err := dec.Decode(&msg); err != nil {
			return nil, nil, Greeting{}, fail(err)
		}
		if msg.Event != "" {
			continue // QEMU does not send events before negotiation; be lenient
		}
		if msg.Error != nil {
			return nil, nil, Greeting{}, fmt.Errorf("qmp %s: %w", socketPath,
				&CommandError{Command: capsCmd, Class: msg.Error.Class, Desc: msg.Error.Desc})
		}
		break
	}
	if !stop() {
		// ctx ended just now and may have poisoned the deadline.
		return nil, nil, Greeting{}, fail(os.ErrDeadlineExceeded)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, nil, Greeting{}, fmt.Errorf("qmp %s: %w", socketPath, err)
	}
	opts.Logger.Debug("qmp connected", "socket", socketPath, "qemu", greeting.Version.String(),
		"duration", time.Since(start))
	ok = true
	return conn, dec, greeting, nil
}

// pushDropOldest delivers e on ch without ever blocking: when ch's buffer is
// full the oldest event is discarded and counted. The caller must be ch's
// only sender.
func pushDropOldest(ch chan gqmp.Event, e gqmp.Event, dropped func()) {
	for {
		select {
		case ch <- e:
			return
		default:
		}
		select {
		case <-ch:
			dropped()
		default:
		}
	}
}
