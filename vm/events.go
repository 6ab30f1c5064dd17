package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/virtcon/virtcon/qmp"
)

// Event is one QMP event of a VM: SHUTDOWN, RESET, STOP, RESUME,
// GUEST_PANICKED, BLOCK_IO_ERROR, DEVICE_DELETED and whatever else QEMU
// sends, with QEMU's own timestamp.
type Event struct {
	UID   string         `json:"uid" yaml:"uid"`
	Name  string         `json:"name" yaml:"name"`
	Event string         `json:"event" yaml:"event"`
	At    time.Time      `json:"at" yaml:"at"`
	Data  map[string]any `json:"data,omitempty" yaml:"data,omitempty"`
}

// EventTimeFormat is how an event's time is written (JSON, YAML, the
// table): RFC 3339 with microseconds, QEMU's resolution, always 6 digits,
// so that lines align and sort as text.
const EventTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// eventOut is an Event as written: its time in EventTimeFormat (a
// time.Time marshals with as many digits as it needs: .25, .250001).
type eventOut struct {
	UID   string         `json:"uid" yaml:"uid"`
	Name  string         `json:"name" yaml:"name"`
	Event string         `json:"event" yaml:"event"`
	At    string         `json:"at" yaml:"at"`
	Data  map[string]any `json:"data,omitempty" yaml:"data,omitempty"`
}

func (e Event) out() eventOut {
	return eventOut{UID: e.UID, Name: e.Name, Event: e.Event, At: e.At.Format(EventTimeFormat), Data: e.Data}
}

// MarshalJSON writes the event with its time in EventTimeFormat; it reads
// back into an Event (RFC 3339).
func (e Event) MarshalJSON() ([]byte, error) { return json.Marshal(e.out()) }

// MarshalYAML writes the event with its time in EventTimeFormat.
func (e Event) MarshalYAML() (any, error) { return e.out(), nil }

// A VM's QMP event sockets. QEMU serves one client per socket: the
// agent's inventory follows the events socket, and `virt vm events` the
// watch socket, falling back to the events socket when the watch socket
// is busy (another `virt vm events`) or absent (a VM started before it
// existed). See qemu.go's -qmp options.
const watchSockName = "qmp-watch.sock"

// ErrEventsBusy is returned when every event socket of a VM has its
// reader already: QEMU serves one client per socket.
var ErrEventsBusy = errors.New("every QMP event socket of the VM has a reader already")

// FollowOptions tune FollowEvents.
type FollowOptions struct {
	Logger *slog.Logger
	// DialFor is how long a socket that refuses or does not greet is
	// tried again (QEMU greets once its main loop runs, a moment after
	// making the socket); 0: one try.
	DialFor time.Duration
	// DialTimeout bounds one handshake (default 2s).
	DialTimeout time.Duration
	// Connected is called once the handshake is done, before any event
	// is handed on: every later event is buffered by then, so what the
	// caller asks QMP now is not overtaken by an older event.
	Connected func()
}

// FollowEvents is the one QMP event reader: it connects to the event
// socket sock and calls f with each event in the order QEMU sent it,
// until ctx ends (nil) or QEMU goes (nil: the stream ended). A socket
// that cannot be dialled within DialFor is the dial's error (qmp.ErrBusy
// when it has another client). uid and name label the events.
func FollowEvents(ctx context.Context, sock, uid, name string, o FollowOptions, f func(Event)) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	var es *qmp.EventStream
	var err error
	for giveUp := time.Now().Add(o.DialFor); ; {
		dctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
		es, err = qmp.DialEvents(dctx, sock, qmp.Options{Logger: o.Logger, Timeout: o.DialTimeout})
		cancel()
		if err == nil || ctx.Err() != nil || !time.Now().Before(giveUp) {
			break
		}
		if _, serr := os.Stat(sock); serr != nil {
			break // the socket went: QEMU stopped
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		if es != nil {
			es.Close()
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer es.Close()
	stop := context.AfterFunc(ctx, func() { es.Close() })
	defer stop()
	if o.Connected != nil {
		o.Connected()
	}
	for ev := range es.C() {
		f(Event{UID: uid, Name: name, Event: ev.Event, Data: ev.Data,
			At: time.Unix(ev.Timestamp.Seconds, ev.Timestamp.Microseconds*1000).UTC()})
	}
	return nil
}

// EventsOptions tune Events.
type EventsOptions struct {
	// Ready is called once every VM's reader is connected: events from
	// then on are delivered.
	Ready func(followed []string)
}

// Events follows the QMP events of the VMs named by refs (empty: every
// running VM of ours) and calls f with each, one call at a time, until
// ctx ends or every followed VM's QEMU has gone. A named VM that does
// not run is ErrNotRunning; one whose event sockets all have readers is
// ErrEventsBusy; a QEMU that went without SHUTDOWN is a QEMUEndedError
// (returned once every other VM's QEMU has gone too, or ctx ended). Nothing from before the connection is replayed: QEMU
// keeps no event history.
func (m *Manager) Events(ctx context.Context, refs []string, o EventsOptions, f func(Event)) error {
	vms, err := m.statsTargets(refs)
	if err != nil {
		return fmt.Errorf("vm events: %w", err)
	}
	type target struct{ uid, name string }
	var ts []target
	for _, v := range vms {
		if m.livePID(v.Metadata.UID) == 0 {
			if len(refs) > 0 {
				return fmt.Errorf("vm %q: events: %w", v.Metadata.Name, ErrNotRunning)
			}
			continue
		}
		ts = append(ts, target{v.Metadata.UID, v.Metadata.Name})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex // one f call at a time
		wg      sync.WaitGroup
		ready   sync.WaitGroup
		errMu   sync.Mutex
		firstEr error
		fatal   bool // an error that ends every reader (not a QEMU that ended)
	)
	for _, t := range ts {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			once := sync.OnceFunc(ready.Done)
			defer once()
			err := m.followVM(ctx, t.uid, t.name, once, func(e Event) {
				mu.Lock()
				defer mu.Unlock()
				if ctx.Err() == nil {
					f(e)
				}
			})
			if err != nil {
				// a QEMU that ended was followed (and leaves the other
				// VMs' events going); any other error ends them all
				var ended *QEMUEndedError
				isFatal := !errors.As(err, &ended)
				errMu.Lock()
				if firstEr == nil || (isFatal && !fatal) {
					firstEr = err // the first error that ended them all, if any
				}
				fatal = fatal || isFatal
				errMu.Unlock()
				if isFatal {
					cancel()
				}
			}
		}()
	}
	ready.Wait()
	errMu.Lock()
	failed := fatal
	errMu.Unlock()
	if !failed && o.Ready != nil && ctx.Err() == nil {
		names := make([]string, len(ts))
		for i, t := range ts {
			names[i] = t.name
		}
		o.Ready(names)
	}
	wg.Wait()
	return firstEr
}

// ErrQEMUEnded is wrapped by a QEMUEndedError: a followed VM's QEMU went
// without a SHUTDOWN event (killed -9, or it crashed).
var ErrQEMUEnded = errors.New("QEMU ended without SHUTDOWN")

// QEMUEndedError is a followed VM's event stream that ended without the
// SHUTDOWN event every orderly end of QEMU sends (a guest power-off, a
// quit, SIGTERM): its QEMU was killed or crashed.
type QEMUEndedError struct {
	VM  string
	PID int // 0: not known
}

func (e *QEMUEndedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("vm %q: events: %s (pid %d: killed, or it crashed)", e.VM, ErrQEMUEnded, e.PID)
	}
	return fmt.Sprintf("vm %q: events: %s (killed, or it crashed)", e.VM, ErrQEMUEnded)
}

func (e *QEMUEndedError) Unwrap() error { return ErrQEMUEnded }

// followVM reads one VM's events from its watch socket, or its events
// socket when the watch socket is busy or absent. A stream that ends
// before ctx without a SHUTDOWN is a QEMUEndedError.
func (m *Manager) followVM(ctx context.Context, uid, name string, connected func(), f func(Event)) error {
	o := FollowOptions{Logger: m.log, DialFor: 0, DialTimeout: 500 * time.Millisecond, Connected: connected}
	pid := m.livePID(uid)
	shutdown := false
	see := func(e Event) {
		if e.Event == "SHUTDOWN" {
			shutdown = true
		}
		f(e)
	}
	var errs []error
	for _, sock := range []string{m.runPath(uid, watchSockName), m.runPath(uid, evtSockName)} {
		if _, err := os.Stat(sock); err != nil {
			continue
		}
		err := FollowEvents(ctx, sock, uid, name, o, see)
		if err == nil {
			if ctx.Err() == nil && !shutdown {
				return &QEMUEndedError{VM: name, PID: pid}
			}
			return nil
		}
		errs = append(errs, err)
		if !errors.Is(err, qmp.ErrBusy) {
			return fmt.Errorf("vm %q: events: %w", name, err)
		}
	}
	if len(errs) == 0 {
		if m.livePID(uid) == 0 {
			return nil // it stopped meanwhile: nothing more to tell
		}
		return fmt.Errorf("vm %q: events: no QMP event socket in %s", name, m.layout().VMRunDir(uid))
	}
	return fmt.Errorf("vm %q: events: %w (%w)", name, ErrEventsBusy, errors.Join(errs...))
}
