package webterm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/virtcon/virtcon/auth"
	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// SessionInfo is one session of a running web terminal, as `virt webterm
// status` shows it.
type SessionInfo struct {
	User   string    `json:"user"`
	Source string    `json:"source"`
	Since  time.Time `json:"since"`
	// ReadOnly: another console holds the single-writer console lock
	// (the session's DCUI shows [RO]).
	ReadOnly bool   `json:"readOnly"`
	TTY      string `json:"tty"` // the DCUI's console name, "web/<id>"
	PID      int    `json:"pid"` // the DCUI's process
	// Attached: a browser is connected (else the session waits for one
	// to reattach).
	Attached bool `json:"attached"`
}

// sessionsFile is the server's list of sessions, next to its record:
// <RunDir>/webterm-sessions.json, 0600, replaced atomically on every
// change. ServerPID ties it to the record: a list left by a killed server
// is not a later server's.
type sessionsFile struct {
	ServerPID int           `json:"serverPid"`
	Sessions  []SessionInfo `json:"sessions"`
}

// SessionsFile is where a running web terminal lists its sessions.
func SessionsFile(layout paths.Layout) string {
	return filepath.Join(filepath.Dir(layout.WebtermRecordFile()), "webterm-sessions.json")
}

// writeSessions replaces the sessions file with the sessions now.
func (s *Server) writeSessions() {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.mu.Lock()
	list := []SessionInfo{}
	for _, l := range s.sessions {
		for _, t := range l.terms {
			if t.finished {
				continue
			}
			list = append(list, SessionInfo{
				User: l.ident.User, Source: l.source, Since: t.since,
				TTY: t.TTYName(), PID: t.pid, Attached: t.conn != nil,
			})
		}
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Since.Before(list[j].Since) })
	b, err := json.MarshalIndent(sessionsFile{ServerPID: os.Getpid(), Sessions: readOnly(s.opts.Layout, list)}, "", "  ")
	if err == nil {
		// under the runtime directory, gone at the next boot: no fsync
		err = atomicfile.WriteVolatile(SessionsFile(s.opts.Layout), append(b, '\n'), 0o600)
	}
	if err != nil {
		s.log.Error("web terminal: sessions file not written", "err", err)
	}
}

func (s *Server) removeSessions() {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if err := os.Remove(SessionsFile(s.opts.Layout)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Error("web terminal: sessions file not removed", "err", err)
	}
}

// ReadSessions returns the sessions of the web terminal rec describes
// (Read's answer), read-only or not as the console lock says now. A list
// that is missing or another process's is no sessions.
func ReadSessions(layout paths.Layout, rec *Record) ([]SessionInfo, error) {
	if rec == nil {
		return nil, nil
	}
	path := SessionsFile(layout)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return []SessionInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("web terminal sessions: %w", err)
	}
	var f sessionsFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("web terminal sessions %s: %w", path, err)
	}
	if f.ServerPID != rec.PID {
		return []SessionInfo{}, nil
	}
	if f.Sessions == nil {
		f.Sessions = []SessionInfo{}
	}
	return readOnly(layout, f.Sessions), nil
}

// readOnly marks the sessions whose DCUI does not hold the console lock,
// from the lock's holder record.
func readOnly(layout paths.Layout, list []SessionInfo) []SessionInfo {
	holder := 0
	if b, err := os.ReadFile(filepath.Join(layout.RunDir(), auth.ConsoleHolderFile)); err == nil {
		var h auth.Holder
		if json.Unmarshal(b, &h) == nil {
			holder = h.PID
		}
	}
	for i := range list {
		list[i].ReadOnly = holder == 0 || list[i].PID != holder
	}
	return list
}
