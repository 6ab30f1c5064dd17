package agent

import (
	"fmt"
	"net"
	"slices"

	"github.com/virtcon/virtcon/internal/atomicfile"
)

// rotation is the order the agent dials the director's addresses in:
// from a random start (so that a fleet spreads over the replicas), on to
// the next after every session that ends. Only Run's goroutine uses it.
type rotation struct {
	addrs []string
	i     int
	// failed counts attempts without Registered since the last one that
	// got it: the backoff grows only once every address has failed.
	failed int
}

// set takes the current address list, keeping the position on the
// address dialled now when it is still there.
func (ro *rotation) set(addrs []string) {
	cur := ro.current()
	ro.addrs = addrs
	if i := slices.Index(addrs, cur); i >= 0 {
		ro.i = i
	} else {
		ro.i %= len(addrs)
	}
}

func (ro *rotation) current() string {
	if len(ro.addrs) == 0 {
		return ""
	}
	return ro.addrs[ro.i%len(ro.addrs)]
}

// ended moves on after a session; it says whether a whole round has
// failed (the caller backs off then, else it tries the next at once).
func (ro *rotation) ended(registered bool) (roundFailed bool) {
	ro.i = (ro.i + 1) % len(ro.addrs)
	if registered {
		ro.failed = 0
		return false
	}
	ro.failed++
	return ro.failed%len(ro.addrs) == 0
}

// directorsFrom takes the director addresses a director named (its
// replicas): stored in agent.yaml's directors list when they differ from
// it, atomically; an empty or wholly invalid list changes nothing. The
// enrolment's director stays in the rotation whatever the list says.
func (r *runner) directorsFrom(addrs []string) {
	var valid []string
	for _, a := range addrs {
		switch {
		case !validAddr(a):
			r.log.Warn("the director named an address that is not host:port; ignored", "addr", a)
		case !slices.Contains(valid, a):
			valid = append(valid, a)
		}
	}
	if len(valid) == 0 || slices.Equal(valid, r.id.cfg.Directors) {
		return
	}
	if err := r.storeDirectors(valid); err != nil {
		r.log.Warn("director addresses not stored; the agent keeps the ones it has", "addrs", valid, "err", err)
		return
	}
	r.id.cfg.Directors = valid
	r.rot.set(r.id.cfg.Addrs())
	r.log.Info("director addresses stored", "directors", valid)
}

// storeDirectors rewrites agent.yaml with the directors list (the rest as
// it is on disk).
func (r *runner) storeDirectors(addrs []string) error {
	c, err := loadConfig(r.l)
	if err != nil {
		return err
	}
	c.Directors = addrs
	if err := c.validate(); err != nil {
		return err
	}
	b, err := MarshalConfig(c)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(ConfigFile(r.l), b, 0o600); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	return nil
}

// hostOf is addr's host, what the director's certificate must name.
func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}
