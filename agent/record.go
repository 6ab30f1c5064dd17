package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/paths"
)

// Session states, as the record and Status carry them.
const (
	StateConnecting = "connecting"
	StateConnected  = "connected"
	StateBackoff    = "backoff"
	StateRevoked    = "revoked"
	StateExpired    = "expired"
	StateStopped    = "stopped"
)

// record is AgentRecordFile, the running agent's runtime record: who it is
// (pid, start time, boot: a later process given the same pid is told
// apart) and how its session goes. It is replaced atomically on every
// change; readers trust it only while its process lives.
type record struct {
	PID              int       `json:"pid"`
	PIDStart         uint64    `json:"pidStart"`
	BootID           string    `json:"bootId,omitempty"`
	StartedAt        time.Time `json:"startedAt"`
	State            string    `json:"state"`
	Director         string    `json:"director"`
	NodeID           string    `json:"nodeID"`
	CertNotAfter     time.Time `json:"certNotAfter,omitzero"`
	LastHeartbeatAck time.Time `json:"lastHeartbeatAck,omitzero"`
	LastError        string    `json:"lastError,omitempty"`
	NextRetry        time.Time `json:"nextRetry,omitzero"`
}

// recorder keeps the record of this process.
type recorder struct {
	path string
	mu   sync.Mutex
	r    record
}

func newRecorder(l paths.Layout, now time.Time) (*recorder, error) {
	pid := os.Getpid()
	st, err := proc.ReadStat(pid)
	if err != nil {
		return nil, fmt.Errorf("agent record: own start time: %w", err)
	}
	return &recorder{path: l.AgentRecordFile(), r: record{PID: pid, PIDStart: st.Start, BootID: proc.BootID(), StartedAt: now.UTC()}}, nil
}

// update changes the record with f and writes it.
func (rc *recorder) update(f func(r *record)) error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	f(&rc.r)
	b, err := json.MarshalIndent(rc.r, "", "  ")
	if err != nil {
		return err
	}
	// under the runtime directory, gone at the next boot: no fsync
	if err := atomicfile.WriteVolatile(rc.path, append(b, '\n'), fileMode); err != nil {
		return fmt.Errorf("agent record: %w", err)
	}
	return nil
}

// readRecord returns the record and whether its process is the live one
// that wrote it. No record is nil, false and no error.
func readRecord(l paths.Layout) (*record, bool, error) {
	path := l.AgentRecordFile()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("agent record: %w", err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, false, fmt.Errorf("agent record %s: %w", path, err)
	}
	if r.PID <= 0 || r.PIDStart == 0 {
		return nil, false, fmt.Errorf("agent record %s: pid %d, start %d: names no process", path, r.PID, r.PIDStart)
	}
	alive, err := r.alive()
	if err != nil {
		return nil, false, fmt.Errorf("agent record %s: %w", path, err)
	}
	return &r, alive, nil
}

func (r *record) alive() (bool, error) {
	return proc.Same(r.PID, r.PIDStart, r.BootID)
}
