package vm

import (
	"context"
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
// ErrEventsBusy. Nothing from before the connection is replayed: QEMU
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
				errMu.Lock()
				if firstEr == nil {
					firstEr = err
				}
				errMu.Unlock()
				cancel()
			}
		}()
	}
	ready.Wait()
	errMu.Lock()
	failed := firstEr
	errMu.Unlock()
	if failed == nil && o.Ready != nil && ctx.Err() == nil {
		names := make([]string, len(ts))
		for i, t := range ts {
			names[i] = t.name
		}
		o.Ready(names)
	}
	wg.Wait()
	return firstEr
}

// followVM reads one VM's events from its watch socket, or its events
// socket when the watch socket is busy or absent.
func (m *Manager) followVM(ctx context.Context, uid, name string, connected func(), f func(Event)) error {
	o := FollowOptions{Logger: m.log, DialFor: 0, DialTimeout: 500 * time.Millisecond, Connected: connected}
	var errs []error
	for _, sock := range []string{m.runPath(uid, watchSockName), m.runPath(uid, evtSockName)} {
		if _, err := os.Stat(sock); err != nil {
			continue
		}
		err := FollowEvents(ctx, sock, uid, name, o, f)
		if err == nil {
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
