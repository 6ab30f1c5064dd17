package webterm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/paths"
)

// Record is the runtime record a running web terminal keeps at
// paths.Layout.WebtermRecordFile. Readers trust nothing else: something
// listening on the web terminal's port is not necessarily virtcon's, and
// a record names its process well enough to tell it from a later process
// given the same PID.
type Record struct {
	// Listen is the address it listens on ("0.0.0.0:8443", "[::]:8443").
	Listen string `json:"listen"`
	// URLs are the https:// addresses an operator can open, one per
	// address or name it serves.
	URLs []string `json:"urls"`
	// CertSHA256 is the fingerprint of its TLS certificate, so that an
	// operator can check what the browser shows (hex, colon-separated).
	CertSHA256 string `json:"certSha256"`
	// PID is its process; PIDStart that process's start time (clock ticks
	// after boot, field 22 of /proc/PID/stat) and BootID the boot it runs
	// in: a PID reused by a later process, or one of an earlier boot, has
	// another start time or boot, and the record is stale.
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pidStart"`
	BootID   string `json:"bootId,omitempty"`
}

// Write records r as the calling process's web terminal: PID, PIDStart
// and BootID are this process's, whatever r holds. The file is replaced
// atomically (a reader sees the old record or the new one), mode 0600 in
// a 0700 directory if it has to make one. The server calls Remove when it
// exits; a record left by one that was killed is stale by its PID.
func Write(layout paths.Layout, r Record) error {
	path := layout.WebtermRecordFile()
	self, err := selfIdentity()
	if err != nil {
		return fmt.Errorf("web terminal record %s: %w", path, err)
	}
	r.PID, r.PIDStart, r.BootID = self.PID, self.PIDStart, self.BootID
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("web terminal record %s: %w", path, err)
	}
	// under the runtime directory, gone at the next boot: no fsync needed
	if err := atomicfile.WriteVolatile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("web terminal record: %w", err)
	}
	return nil
}

// Remove deletes the record if it is the calling process's, on the web
// terminal's way out. A record of another process (a web terminal started
// since) stays; none at all is no error.
func Remove(layout paths.Layout) error {
	path := layout.WebtermRecordFile()
	r, err := readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	self, err := selfIdentity()
	if err != nil {
		return fmt.Errorf("web terminal record %s: %w", path, err)
	}
	if r.PID != self.PID || r.PIDStart != self.PIDStart {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("web terminal record: %w", err)
	}
	return nil
}

// Read returns the web terminal's record when it exists and its process
// is alive: the same process (PID and start time) in this boot. It
// returns nil and no error when there is no record, or when the record is
// stale (its process exited, its PID is another process's now, or it was
// written before the host last booted). A record that cannot be read, or
// that does not name a process, is an error: the caller shows no URL.
func Read(layout paths.Layout) (*Record, error) {
	path := layout.WebtermRecordFile()
	r, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	alive, err := r.alive()
	if err != nil {
		return nil, fmt.Errorf("web terminal record %s: %w", path, err)
	}
	if !alive {
		return nil, nil
	}
	return r, nil
}

func readFile(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("web terminal record: %w", err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("web terminal record %s: %w", path, err)
	}
	switch {
	case r.PID <= 0:
		return nil, fmt.Errorf("web terminal record %s: pid %d: not a process", path, r.PID)
	case r.PIDStart == 0:
		return nil, fmt.Errorf("web terminal record %s: pid %d without its start time (pidStart)", path, r.PID)
	}
	return &r, nil
}

// alive reports whether the record's process is the one that wrote it.
func (r *Record) alive() (bool, error) {
	return proc.Same(r.PID, r.PIDStart, r.BootID)
}

// selfIdentity is the calling process as a record names it.
func selfIdentity() (Record, error) {
	pid := os.Getpid()
	st, err := proc.ReadStat(pid)
	if err != nil {
		return Record{}, fmt.Errorf("own start time: %w", err)
	}
	return Record{PID: pid, PIDStart: st.Start, BootID: proc.BootID()}, nil
}
