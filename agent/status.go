package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/virtcon/virtcon/paths"
)

// Status is the agent's state as its files tell it: enrolment
// (credentials), the running agent's session (its runtime record, if its
// process lives) and the persistent alert. `virt agent status` prints it
// (-o json: these names, stable); the DCUI shows Line.
type Status struct {
	Enrolled bool `json:"enrolled" yaml:"enrolled"`
	// Director is host:port; Pin the root CA's sha256:…; NodeID the node.
	Director     string    `json:"director,omitempty" yaml:"director,omitempty"`
	NodeID       string    `json:"nodeID,omitempty" yaml:"nodeID,omitempty"`
	Pin          string    `json:"pin,omitempty" yaml:"pin,omitempty"`
	CertSerial   string    `json:"certSerial,omitempty" yaml:"certSerial,omitempty"`
	CertNotAfter time.Time `json:"certNotAfter,omitzero" yaml:"certNotAfter,omitempty"`
	// Running: an agent process (virt agent run) is alive; PID is it.
	Running bool `json:"running" yaml:"running"`
	PID     int  `json:"pid,omitempty" yaml:"pid,omitempty"`
	// State is connecting, connected, backoff, revoked, expired or
	// stopped ("" when not enrolled).
	State            string    `json:"state,omitempty" yaml:"state,omitempty"`
	LastHeartbeatAck time.Time `json:"lastHeartbeatAck,omitzero" yaml:"lastHeartbeatAck,omitempty"`
	LastError        string    `json:"lastError,omitempty" yaml:"lastError,omitempty"`
	NextRetry        time.Time `json:"nextRetry,omitzero" yaml:"nextRetry,omitempty"`
	// Alert is revoked or expired: the credential is dead, the agent
	// stopped and VMs were untouched; a new enrolment clears it.
	Alert       string    `json:"alert,omitempty" yaml:"alert,omitempty"`
	AlertAt     time.Time `json:"alertAt,omitzero" yaml:"alertAt,omitempty"`
	AlertReason string    `json:"alertReason,omitempty" yaml:"alertReason,omitempty"`
}

// ReadStatus reads the status from the files under l. It does no network
// I/O and is cheap (a few small reads), for a screen that refreshes. A
// record whose process is gone (or is another process now), or that says
// its Run ended, is not a running agent; its last heartbeat and error
// still show. A credential
// file that exists but cannot be read is an error.
func ReadStatus(l paths.Layout) (*Status, error) {
	s := &Status{}
	_, err := os.Stat(IdentityFile(l))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("agent identity: %w", err)
	default:
		id, err := loadIdentity(l)
		if err != nil {
			return nil, err
		}
		s.Enrolled = true
		s.Director, s.NodeID, s.Pin = id.cfg.Director, id.cfg.NodeID, id.cfg.Pin
		s.CertSerial, s.CertNotAfter = serialOf(id.leaf), id.leaf.NotAfter
		s.State = StateStopped
	}
	a, err := readAlert(l)
	if err != nil {
		return nil, err
	}
	if a != nil && s.Enrolled {
		s.Alert, s.AlertAt, s.AlertReason = a.Kind, a.At, a.Reason
		s.State = a.Kind
	}
	rec, alive, err := readRecord(l)
	if err != nil {
		return nil, err
	}
	if rec != nil && s.Enrolled {
		s.LastHeartbeatAck, s.LastError = rec.LastHeartbeatAck, rec.LastError
		if alive && !final(rec.State) {
			s.Running, s.PID, s.State, s.NextRetry = true, rec.PID, rec.State, rec.NextRetry
		}
	}
	return s, nil
}

// final states are those a Run ends in: its process may live on (the
// DCUI's, a test's), the agent does not.
func final(state string) bool {
	return state == StateStopped || state == StateRevoked || state == StateExpired
}

func serialOf(c *x509.Certificate) string {
	if c.SerialNumber == nil {
		return ""
	}
	return c.SerialNumber.Text(16)
}

// Line is the DCUI's one line about the director.
func (s *Status) Line() string {
	if !s.Enrolled {
		return "Director: not enrolled"
	}
	node := shortNode(s.NodeID)
	switch {
	case s.Alert == AlertRevoked:
		return "Director: REVOKED at " + stamp(s.AlertAt) + ": VMs untouched; re-enrol"
	case s.Alert == AlertExpired:
		return "Director: certificate EXPIRED at " + stamp(s.AlertAt) + ": VMs untouched; re-enrol"
	case !s.Running:
		return "Director: enrolled with " + s.Director + " · node " + node + " · agent not running"
	case s.State == StateConnected:
		return "Director: connected to " + s.Director + " · node " + node + " · cert until " + s.CertNotAfter.Local().Format(time.DateOnly)
	default:
		l := "Director: not connected to " + s.Director + " (" + s.State + ")"
		if s.LastError != "" {
			l += ": " + s.LastError
		}
		return l
	}
}

func shortNode(id string) string {
	if len(id) > 8 {
		return id[:8] + "…"
	}
	return id
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return t.Local().Format("2006-01-02 15:04")
}
