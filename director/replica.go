package director

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/virtcon/virtcon/internal/atomicfile"
)

// ReplicaIDFileName is where a replica keeps the id it made itself.
const ReplicaIDFileName = "replica-id"

// ValidReplicaID is the rule for a replica id: one DNS label (letters,
// digits, inner hyphens), 1-63 characters.
func ValidReplicaID(id string) bool {
	return id != "" && !strings.Contains(id, ".") && ValidNodeName(id)
}

// loadReplicaID is given when set; else the id in dataDir/replica-id,
// made (random, "r-" and 12 hex digits) and kept there on first start.
func loadReplicaID(dataDir, given string) (string, error) {
	if given != "" {
		if !ValidReplicaID(given) {
			return "", fmt.Errorf("director: replica id %q: want one label of letters, digits and '-', 1-63 characters", truncate(given, 64))
		}
		return given, nil
	}
	path := filepath.Join(dataDir, ReplicaIDFileName)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if !ValidReplicaID(id) {
			return "", fmt.Errorf("director: %s: replica id %q: want one label of letters, digits and '-' (fix or remove the file)", path, truncate(id, 64))
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("director: replica id: %w", err)
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("director: replica id: %w", err)
	}
	id := "r-" + hex.EncodeToString(r[:])
	if err := atomicfile.Write(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("director: replica id: %w", err)
	}
	return id, nil
}

// startTasks starts the watches that route tasks and resync requests to
// the sessions this replica holds, and the task sweeper.
func (d *Director) startTasks(ctx context.Context) error {
	rev, err := d.currentRev(ctx, preTasks)
	if err != nil {
		return err
	}
	d.wg.Add(3)
	go func() {
		defer d.wg.Done()
		d.followTasks(d.bg, rev)
	}()
	go func() {
		defer d.wg.Done()
		d.followResync(d.bg, rev)
	}()
	go func() {
		defer d.wg.Done()
		d.whileLeader(d.bg, d.taskSweepLoop) // a singleton: the leader's
	}()
	return nil
}
