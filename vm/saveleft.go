package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/qmp"
)

// A virt killed in the middle of `vm save` leaves QEMU paused by the save
// (QEMU goes on writing the stream to the file it was given and then
// waits, postmigrate), an unrecorded saved.state.tmp, and, past the point
// where the record is written, a saved state of a QEMU still alive. Nobody
// would resume that guest: `vm show` said Paused and nothing said why.
// So a save records in the run directory that it is under way
// (saveRunName), and the first QMP session under a later hold of the VM's
// lock undoes an interrupted one as a failed save is undone: the
// migration cancelled, the guest continued if it ran before, the stream
// and any record of it removed (the guest runs on, so it is stale).

// saveRunName records in a VM's run directory that a save is under way.
const saveRunName = "save-run.json"

// saveRunRecord is saveRunName: whether the guest ran before the save
// paused it, and who saved it when.
type saveRunRecord struct {
	Resume    bool      `json:"resume"`
	StartedAt time.Time `json:"startedAt"`
	PID       int       `json:"pid"`     // virt's
	QEMUPID   int       `json:"qemuPID"` // of the QEMU saved
}

func (m *Manager) recordSaveRun(uid string, qemuPID int, resume bool) error {
	b, err := json.Marshal(saveRunRecord{Resume: resume, StartedAt: time.Now().UTC(), PID: os.Getpid(), QEMUPID: qemuPID})
	if err != nil {
		return err
	}
	return atomicfile.Write(m.runPath(uid, saveRunName), append(b, '\n'), 0o600)
}

// undoInterruptedSave undoes the save recorded in uid's run directory,
// which the caller has proven no live virt finishes (it holds the VM's
// lock). Nothing is done without a record.
func (m *Manager) undoInterruptedSave(ctx context.Context, mon *qmp.Monitor, uid string) error {
	b, err := os.ReadFile(m.runPath(uid, saveRunName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec saveRunRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("%s: %w", saveRunName, err)
	}
	if pid := m.livePID(uid); rec.QEMUPID <= 0 || pid != rec.QEMUPID {
		// the QEMU saved is gone (the save got as far as its quit, or it
		// died): this is another (a resume's), and a finished save's
		// record and stream are what it resumes from
		os.Remove(m.savedStatePath(uid) + ".tmp")
		os.Remove(m.runPath(uid, saveRunName))
		return nil
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveCleanupTimeout)
	defer cancel()
	var info qmp.MigrationInfo
	if err := m.execLong(c, mon, nil, "query-migrate", nil, &info); err != nil {
		return fmt.Errorf("query-migrate: %w", err)
	}
	if info.Status != "" && !info.Done() {
		if err := mon.MigrateCancel(c); err != nil {
			return fmt.Errorf("cancel the migration: %w", err)
		}
		if _, err := m.waitMigration(c, mon, nil, func() bool { return false }); err != nil {
			return fmt.Errorf("the cancelled migration: %w", err)
		}
	}
	if rec.Resume {
		st, err := mon.Status(c)
		if err != nil {
			return fmt.Errorf("query-status: %w", err)
		}
		switch st.Status {
		case "paused", "postmigrate", "finish-migrate":
			if err := mon.Cont(c); err != nil {
				return fmt.Errorf("resume the guest: %w", err)
			}
		}
	}
	// the guest runs on: a stream of it, recorded or not, is stale
	os.Remove(m.savedStatePath(uid) + ".tmp")
	if m.anySaved(uid) {
		if err := m.spendSaved(uid); err != nil {
			return fmt.Errorf("remove the stale saved state: %w", err)
		}
	}
	os.Remove(m.runPath(uid, saveRunName))
	m.log.Warn("undid a save that an interrupted virt left half done: the guest runs on", "vm", uid, "resumed", rec.Resume, "saved-by-pid", rec.PID)
	return nil
}

// interruptedSaveNote is what vm show says of a save whose virt ended
// before it did; "" when none is recorded or its virt still runs.
func (m *Manager) interruptedSaveNote(uid string) string {
	b, err := os.ReadFile(m.runPath(uid, saveRunName))
	if err != nil {
		return ""
	}
	var rec saveRunRecord
	if json.Unmarshal(b, &rec) == nil && rec.PID > 0 && syscall.Kill(rec.PID, 0) == nil {
		return "" // being saved
	}
	return "a vm save was interrupted (the virt saving it ended); the next command on the VM (virt vm resume, stop, …) undoes it and lets the guest run on as before"
}
