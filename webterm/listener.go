package webterm

import (
	"log/slog"
	"net"
	"sync"
)

// maxConns caps the connections the server holds at once, TLS
// handshakes, logins and WebSockets together (a variable for the tests).
var maxConns = 256

// limitListener accepts at most max connections at once: one over the
// cap is closed at once (a client that opens connections and sends
// nothing, or a byte at a time, runs out of its own, not of the server's
// goroutines and descriptors).
type limitListener struct {
	net.Listener
	log   *slog.Logger
	slots chan struct{}
}

func newLimitListener(ln net.Listener, max int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, log: log, slots: make(chan struct{}, max)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			l.log.Debug("web terminal: connection refused: too many at once", "max", cap(l.slots), "source", c.RemoteAddr().String())
			c.Close()
		}
	}
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
