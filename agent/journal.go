package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/paths"
)

// The task journal, AgentStateDir/tasks/<id>.json (dir 0700, files 0600):
// one record per task id the agent ever took, written durably before its
// Queued status goes out. It is what makes a redelivered task harmless
// (its last status is sent again, it never runs twice) and what tells a
// restarted agent which tasks it left unfinished (those fail with
// AGENT_RESTARTED: their effect is unknown, they are never rerun).
const (
	journalVersion = 1
	// journalKeep is how long a terminal record is kept (redelivery of a
	// task the director still holds is answered from it).
	journalKeep = 7 * 24 * time.Hour
	// journalCap bounds the records; the oldest terminal ones go first.
	journalCap = 10000
	// resendWindow: after every Registered the last status of each task
	// not yet ended or ended this recently is sent again (at most
	// resendMax of them).
	resendWindow = time.Hour
	resendMax    = 200
	// unreadableSeq is the seq of the failure that replaces a record that
	// cannot be read: higher than any status the agent sent for it, so the
	// director takes it.
	unreadableSeq = 1 << 20
)

// TasksDir is where the task journal lives.
func TasksDir(l paths.Layout) string { return filepath.Join(l.AgentStateDir(), "tasks") }

// jrecord is one task's journal record.
type jrecord struct {
	V          int       `json:"v"`
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Summary    string    `json:"summary,omitempty"`
	ReceivedAt time.Time `json:"receivedAt"`
	// Phase is the last status's phase (TaskPhase's name); Seq its seq.
	Phase   string          `json:"phase"`
	Seq     uint64          `json:"seq"`
	Last    json.RawMessage `json:"last"` // protojson TaskStatus
	EndedAt time.Time       `json:"endedAt,omitzero"`
	// TryID and TryDeadline are an apply-network's netcfg trial.
	TryID       string    `json:"tryID,omitempty"`
	TryDeadline time.Time `json:"tryDeadline,omitzero"`

	last *directorv1.TaskStatus // Last, decoded
}

func (r *jrecord) terminal() bool { return terminalPhase(phaseOf(r.Phase)) }

func phaseOf(name string) directorv1.TaskPhase {
	return directorv1.TaskPhase(directorv1.TaskPhase_value[name])
}

func terminalPhase(p directorv1.TaskPhase) bool {
	switch p {
	case directorv1.TaskPhase_TASK_PHASE_SUCCEEDED, directorv1.TaskPhase_TASK_PHASE_FAILED, directorv1.TaskPhase_TASK_PHASE_CANCELLED:
		return true
	}
	return false
}

// journal holds the records in memory and on disk. Safe for concurrent use.
type journal struct {
	dir string
	log *slog.Logger

	mu   sync.Mutex
	recs map[string]*jrecord
}

// validTaskID is what may name a journal file: a UUID's characters.
func validTaskID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') && c != '-' {
			return false
		}
	}
	return true
}

// openJournal loads dir's records. A record that cannot be read keeps its
// id known (a redelivery must not run it again): it is replaced by a
// FAILED AGENT_RESTARTED record. A directory that cannot be read is an
// error: without the journal the agent cannot tell what it already ran.
func openJournal(dir string, log *slog.Logger, now time.Time) (*journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("task journal: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("task journal: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("task journal: %w", err)
	}
	j := &journal{dir: dir, log: log, recs: map[string]*jrecord{}}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() || !validTaskID(id) {
			continue // temporaries of an interrupted write, strangers
		}
		rec, err := readJournalRecord(filepath.Join(dir, e.Name()))
		if err != nil || rec.ID != id {
			if err == nil {
				err = fmt.Errorf("it names task %q", rec.ID)
			}
			log.Warn("task journal record unreadable: the task counts as failed, it is not run again", "task", id, "err", err)
			rec = &jrecord{V: journalVersion, ID: id, Kind: "unknown", ReceivedAt: now}
			st := &directorv1.TaskStatus{TaskId: id, Seq: unreadableSeq, Phase: directorv1.TaskPhase_TASK_PHASE_FAILED,
				Failure: &directorv1.TaskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_AGENT_RESTARTED,
					Message: "the agent's journal record of this task could not be read; its effect is unknown"}}
			if err := j.setStatus(rec, st, now); err != nil {
				return nil, err
			}
		}
		j.recs[id] = rec
	}
	return j, nil
}

func readJournalRecord(path string) (*jrecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec jrecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.V != journalVersion {
		return nil, fmt.Errorf("version %d, want %d", rec.V, journalVersion)
	}
	rec.last = &directorv1.TaskStatus{}
	if err := protojson.Unmarshal(rec.Last, rec.last); err != nil {
		return nil, fmt.Errorf("last status: %w", err)
	}
	return &rec, nil
}

func (j *journal) path(id string) string { return filepath.Join(j.dir, id+".json") }

// get returns a copy of id's record, or nil.
func (j *journal) get(id string) *jrecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r, ok := j.recs[id]; ok {
		c := *r
		return &c
	}
	return nil
}

// create journals a new task with its first status, durably. It fails
// (changing nothing) when the id is already there: the caller resends
// that record's status instead.
func (j *journal) create(rec *jrecord, st *directorv1.TaskStatus, now time.Time) (exists bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.recs[rec.ID]; ok {
		return true, nil
	}
	rec.V = journalVersion
	if err := j.setStatus(rec, st, now); err != nil {
		return false, err
	}
	j.recs[rec.ID] = rec
	return false, nil
}

// update records a later status of a known task. Phase changes are
// written durably; a progress status only in memory (a power loss loses
// progress, never a phase).
func (j *journal) update(id string, st *directorv1.TaskStatus, now time.Time, edit func(*jrecord)) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	rec, ok := j.recs[id]
	if !ok {
		return fmt.Errorf("task journal: no record of task %s", id)
	}
	if edit != nil {
		edit(rec)
	}
	if st == nil {
		return j.write(rec)
	}
	if rec.Phase == st.GetPhase().String() {
		// progress: keep the latest in memory
		rec.Seq, rec.last = st.GetSeq(), st
		return nil
	}
	return j.setStatus(rec, st, now)
}

// setStatus makes st rec's last status and writes rec durably.
func (j *journal) setStatus(rec *jrecord, st *directorv1.TaskStatus, now time.Time) error {
	rec.Phase, rec.Seq, rec.last = st.GetPhase().String(), st.GetSeq(), st
	if terminalPhase(st.GetPhase()) && rec.EndedAt.IsZero() {
		rec.EndedAt = now.UTC()
	}
	return j.write(rec)
}

func (j *journal) write(rec *jrecord) error {
	last, err := protojson.Marshal(rec.last)
	if err != nil {
		return fmt.Errorf("task journal: task %s: %w", rec.ID, err)
	}
	rec.Last = last
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("task journal: task %s: %w", rec.ID, err)
	}
	if err := atomicfile.Write(j.path(rec.ID), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("task journal: %w", err)
	}
	return nil
}

// unfinished returns the records left Queued or Running (by a previous
// process, when called before any task of this one is taken).
func (j *journal) unfinished() []*jrecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*jrecord
	for _, r := range j.recs {
		if !r.terminal() {
			c := *r
			out = append(out, &c)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ReceivedAt.Before(out[b].ReceivedAt) })
	return out
}

// resendable returns the last status of each task not ended, or ended
// less than resendWindow ago: oldest first, at most resendMax.
func (j *journal) resendable(now time.Time) []*directorv1.TaskStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	var recs []*jrecord
	for _, r := range j.recs {
		if !r.terminal() || now.Sub(r.EndedAt) < resendWindow {
			recs = append(recs, r)
		}
	}
	sort.Slice(recs, func(a, b int) bool { return recs[a].ReceivedAt.Before(recs[b].ReceivedAt) })
	if len(recs) > resendMax {
		recs = recs[len(recs)-resendMax:]
	}
	out := make([]*directorv1.TaskStatus, len(recs))
	for i, r := range recs {
		out[i] = r.last
	}
	return out
}

// prune removes terminal records ended more than journalKeep ago, and the
// oldest terminal ones beyond journalCap. Records of unfinished tasks
// stay whatever their age.
func (j *journal) prune(now time.Time) (removed int, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var terminal []*jrecord
	for _, r := range j.recs {
		if r.terminal() {
			terminal = append(terminal, r)
		}
	}
	sort.Slice(terminal, func(a, b int) bool { return terminal[a].EndedAt.Before(terminal[b].EndedAt) })
	over := len(j.recs) - journalCap
	var errs []error
	for _, r := range terminal {
		if now.Sub(r.EndedAt) <= journalKeep && over <= 0 {
			break
		}
		if err := os.Remove(j.path(r.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		delete(j.recs, r.ID)
		removed++
		over--
	}
	return removed, errors.Join(errs...)
}
