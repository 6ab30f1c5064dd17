package webterm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"
)

// Identity is what the server tells a session's DCUI about its user, who
// logged in through PAM in the server: on an inherited pipe (the DCUI's
// --web-session-fd), never on its command line or in its environment.
type Identity struct {
	User    string   `json:"user"`
	UID     int      `json:"uid"`
	Groups  []string `json:"groups"`
	Source  string   `json:"source"`  // the browser's address
	Session string   `json:"session"` // the session's short id: its console is "web/<session>"
}

// TTYName is the console name of the session: for the audit log and the
// console lock's holder ("alice on web/1a2b3c4d since 09:12").
func (id *Identity) TTYName() string { return "web/" + id.Session }

// ErrNotPipe is returned by ReadIdentity for a descriptor that is not a
// pipe: a web session's identity comes on a pipe its server wrote and
// closed, never from a file or a terminal someone else could fill.
var ErrNotPipe = errors.New("not a pipe")

const maxIdentity = 4 << 10

// ExitLoggedOut is the exit status of a web session's DCUI whose user
// logged out or locked it (F12/x, F2/l): the server then ends the whole
// login, every tab of it, and its cookie, not only this session.
const ExitLoggedOut = 10

// ReadIdentity reads a session's identity from f, which must be an
// anonymous pipe, to its end (the server closed its side), and closes f. The caller
// checks that it runs as root: only a root process can hand a DCUI its
// user this way.
func ReadIdentity(f *os.File) (*Identity, error) {
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("web session identity on fd %d: %w", f.Fd(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, fmt.Errorf("web session identity on fd %d: %w", f.Fd(), ErrNotPipe)
	}
	// and an anonymous pipe (pipe(2)), not a FIFO made with mkfifo that
	// anyone allowed into its directory could open and write
	if link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err != nil {
		return nil, fmt.Errorf("web session identity on fd %d: %w", f.Fd(), err)
	} else if !strings.HasPrefix(link, "pipe:[") {
		return nil, fmt.Errorf("web session identity on fd %d: %w: a named FIFO (%s), want an anonymous pipe", f.Fd(), ErrNotPipe, trim(link))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxIdentity+1))
	if err != nil {
		return nil, fmt.Errorf("web session identity on fd %d: %w", f.Fd(), err)
	}
	if len(data) > maxIdentity {
		return nil, fmt.Errorf("web session identity on fd %d: longer than %d bytes", f.Fd(), maxIdentity)
	}
	var id Identity
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&id); err != nil {
		return nil, fmt.Errorf("web session identity on fd %d: %w", f.Fd(), err)
	}
	if err := id.validate(); err != nil {
		return nil, fmt.Errorf("web session identity on fd %d: %w", f.Fd(), err)
	}
	return &id, nil
}

func (id *Identity) validate() error {
	switch {
	case id.User == "" || len(id.User) > 256 || strings.ContainsFunc(id.User, unicode.IsControl):
		return fmt.Errorf("user %q: want a user name", id.User)
	case id.UID < 0:
		return fmt.Errorf("uid %d: want 0 or more", id.UID)
	case id.Session == "" || len(id.Session) > 32 || strings.ContainsFunc(id.Session, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f')
	}):
		return fmt.Errorf("session %q: want a short hex id", id.Session)
	}
	return nil
}
