package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	gqmp "github.com/digitalocean/go-qemu/qmp"
)

// EventStream reads QMP events from a connection of its own (QEMU started
// with a second -qmp socket), so that reading events never competes with
// commands. Its reader goroutine never waits for the consumer: the channel
// holds up to Options.EventBuffer events and, when full, the oldest is
// dropped and counted.
type EventStream struct {
	path     string
	log      *slog.Logger
	conn     net.Conn
	greeting Greeting
	ch       chan gqmp.Event
	done     chan struct{}
	dropped  atomic.Uint64

	mu     sync.Mutex
	closed bool  // Close was called
	err    error // why the stream ended, if not Close
}

// DialEvents connects to the QMP socket at socketPath and negotiates
// capabilities like Dial (same errors), then delivers every event QEMU
// sends on C until the connection ends or Close is called.
func DialEvents(ctx context.Context, socketPath string, opts Options) (*EventStream, error) {
	opts = opts.withDefaults()
	conn, dec, greeting, err := handshake(ctx, socketPath, opts)
	if err != nil {
		return nil, err
	}
	s := &EventStream{
		path:     socketPath,
		log:      opts.Logger.With("socket", socketPath),
		conn:     conn,
		greeting: greeting,
		ch:       make(chan gqmp.Event, opts.EventBuffer),
		done:     make(chan struct{}),
	}
	go s.readLoop(dec)
	return s, nil
}

// C delivers events in the order QEMU sent them. It is closed when the
// stream ends; Err then says why.
func (s *EventStream) C() <-chan gqmp.Event { return s.ch }

// Dropped counts events discarded because C's buffer was full.
func (s *EventStream) Dropped() uint64 { return s.dropped.Load() }

// Greeting returns what QEMU announced on connect.
func (s *EventStream) Greeting() Greeting { return s.greeting }

// Err returns why the stream ended on its own (wrapping ErrClosed when
// QEMU hung up), or nil while it runs or after Close.
func (s *EventStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close closes the connection and waits for the reader goroutine to exit;
// C is closed. It is safe to call more than once.
func (s *EventStream) Close() error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()
	if first {
		_ = s.conn.Close()
	}
	<-s.done
	return nil
}

func (s *EventStream) readLoop(dec *json.Decoder) {
	defer close(s.done)
	defer close(s.ch)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if err != nil {
			s.mu.Lock()
			if !s.closed {
				if isConnGone(err) {
					s.err = fmt.Errorf("qmp %s: events: %w: %w", s.path, ErrClosed, err)
				} else {
					s.err = fmt.Errorf("qmp %s: events: reading: %w", s.path, err)
				}
			}
			s.mu.Unlock()
			_ = s.conn.Close()
			return
		}
		var e gqmp.Event
		if err := json.Unmarshal(raw, &e); err != nil || e.Event == "" {
			continue // not an event (no commands are sent here)
		}
		s.log.Debug("qmp event", "event", e.Event)
		pushDropOldest(s.ch, e, func() { s.dropped.Add(1) })
	}
}
