package vm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/virtcon/virtcon/internal/atomicfile"
)

// hotplugRecordName, in the VM's run dir, lists the devices hot-plugged or
// detached since its QEMU started. Save reads the saved shape from QEMU's
// command line (shapeOf), which no longer tells the devices once one was
// hot-plugged: Save refuses while the record names the live QEMU. The pid
// ties it to one QEMU: a record of an earlier run is stale and ignored.
const hotplugRecordName = "hotplug.json"

type hotplugRecord struct {
	PID     int      `json:"pid"`
	Changes []string `json:"changes"`
}

// recordHotplug notes a change, before it is made (fail closed: a crash
// half way still keeps Save from trusting the command line).
func (m *Manager) recordHotplug(uid string, pid int, change string) error {
	path := m.runPath(uid, hotplugRecordName)
	rec, _ := m.readHotplugRecord(uid)
	if rec == nil || rec.PID != pid {
		rec = &hotplugRecord{PID: pid}
	}
	rec.Changes = append(rec.Changes, change)
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("record the hot-plug: %w", err)
	}
	return nil
}

func (m *Manager) readHotplugRecord(uid string) (*hotplugRecord, error) {
	b, err := os.ReadFile(m.runPath(uid, hotplugRecordName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec hotplugRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// checkNotHotplugged is Save's refusal: the QEMU with pid had devices
// hot-plugged or detached. An unreadable record refuses too.
func (m *Manager) checkNotHotplugged(name, uid string, pid int) error {
	rec, err := m.readHotplugRecord(uid)
	if err != nil {
		return fmt.Errorf("vm %q: save: %w: its record %s cannot be read (%v); restart the VM (stop, start) before saving", name, ErrHotplugged, hotplugRecordName, err)
	}
	if rec == nil || rec.PID != pid {
		return nil
	}
	return fmt.Errorf("vm %q: save: %w (%s): a saved state records the devices QEMU was started with; restart the VM (stop, start) to cold-plug them, then save", name, ErrHotplugged, strings.Join(rec.Changes, "; "))
}
