package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// Alert kinds.
const (
	AlertRevoked = "revoked"
	AlertExpired = "expired"
)

// alert is AgentStateDir/alert.json: the director refused the credential
// for good (or it expired). It outlives the agent's process and a reboot,
// so that the status line keeps saying so, and `run` does not dial again
// with a dead credential; a new enrolment (or leave) removes it.
type alert struct {
	Kind     string    `json:"kind"` // revoked or expired
	At       time.Time `json:"at"`
	Director string    `json:"director"`
	NodeID   string    `json:"nodeID"`
	Serial   string    `json:"serial,omitempty"`
	// Reason is the director's word (its Revoked message or error), or
	// this host's ("certificate expired at ...").
	Reason string `json:"reason,omitempty"`
}

func (a *alert) err() error {
	if a.Kind == AlertExpired {
		return ErrExpired
	}
	return ErrRevoked
}

func readAlert(l paths.Layout) (*alert, error) {
	path := AlertFile(l)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent alert: %w", err)
	}
	var a alert
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("agent alert %s: %w", path, err)
	}
	if a.Kind != AlertRevoked && a.Kind != AlertExpired {
		return nil, fmt.Errorf("agent alert %s: kind %q: want %s or %s", path, a.Kind, AlertRevoked, AlertExpired)
	}
	return &a, nil
}

func writeAlert(l paths.Layout, a *alert) error {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return fmt.Errorf("agent alert: %w", err)
	}
	if err := os.MkdirAll(l.AgentStateDir(), dirMode); err != nil {
		return fmt.Errorf("agent alert: %w", err)
	}
	if err := atomicfile.Write(AlertFile(l), append(b, '\n'), fileMode); err != nil {
		return fmt.Errorf("agent alert: %w", err)
	}
	return nil
}

func removeAlert(l paths.Layout) error {
	if err := os.Remove(AlertFile(l)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("agent alert: %w", err)
	}
	return nil
}
