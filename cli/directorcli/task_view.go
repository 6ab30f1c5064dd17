package directorcli

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
)

// Task is a task as virt-director prints it in JSON and YAML: TaskInfo's
// fields in camelCase, times in RFC 3339 (UTC) or null, the phase as
// Pending, Queued, Running, Succeeded, Failed or Cancelled, a failure's
// reason as the API spells it without its prefix (DEADLINE_EXCEEDED).
// docs/director.md documents it.
type Task struct {
	ID              string        `json:"id" yaml:"id"`
	NodeID          string        `json:"nodeId" yaml:"nodeId"`
	NodeHostname    string        `json:"nodeHostname" yaml:"nodeHostname"`
	Kind            string        `json:"kind" yaml:"kind"`
	Summary         string        `json:"summary" yaml:"summary"`
	Phase           string        `json:"phase" yaml:"phase"`
	CreatedAt       *string       `json:"createdAt" yaml:"createdAt"`
	CreatedBy       string        `json:"createdBy" yaml:"createdBy"`
	Deadline        *string       `json:"deadline" yaml:"deadline"`
	CancelRequested bool          `json:"cancelRequested" yaml:"cancelRequested"`
	Progress        *TaskProgress `json:"progress" yaml:"progress"`
	Log             []string      `json:"log" yaml:"log"`
	Failure         *TaskFailure  `json:"failure" yaml:"failure"`
	Result          *TaskResult   `json:"result" yaml:"result"`
	UpdatedAt       *string       `json:"updatedAt" yaml:"updatedAt"`
	ReplicaID       string        `json:"replicaId" yaml:"replicaId"`
	DispatchUs      int64         `json:"dispatchUs" yaml:"dispatchUs"`
}

// TaskProgress is how far a task is: done of total (-1: unknown) units.
type TaskProgress struct {
	Done  int64  `json:"done" yaml:"done"`
	Total int64  `json:"total" yaml:"total"`
	Unit  string `json:"unit" yaml:"unit"`
}

// TaskFailure is why a task failed: a reason, the host's message and the
// input fields it refused.
type TaskFailure struct {
	Reason  string       `json:"reason" yaml:"reason"`
	Message string       `json:"message" yaml:"message"`
	Fields  []FieldError `json:"fields" yaml:"fields"`
}

// FieldError is one refused input: the same words `virt` prints.
type FieldError struct {
	Field   string `json:"field" yaml:"field"`
	Value   string `json:"value" yaml:"value"`
	Message string `json:"message" yaml:"message"`
}

// TaskResult is what a task that succeeded made; one of its fields is
// set, by kind.
type TaskResult struct {
	VM          *VMResult          `json:"vm,omitempty" yaml:"vm,omitempty"`
	Image       *ImageResult       `json:"image,omitempty" yaml:"image,omitempty"`
	Network     *NetworkResult     `json:"network,omitempty" yaml:"network,omitempty"`
	Diagnostics *DiagnosticsResult `json:"diagnostics,omitempty" yaml:"diagnostics,omitempty"`
}

// VMResult is a VM task's VM afterwards; stopHow says how a stop went
// (acpi, quit, killed or not-running).
type VMResult struct {
	UID     string `json:"uid" yaml:"uid"`
	Name    string `json:"name" yaml:"name"`
	Phase   string `json:"phase" yaml:"phase"`
	StopHow string `json:"stopHow" yaml:"stopHow"`
}

// ImageResult is a pulled image.
type ImageResult struct {
	Name      string `json:"name" yaml:"name"`
	SHA256    string `json:"sha256" yaml:"sha256"`
	SizeBytes int64  `json:"sizeBytes" yaml:"sizeBytes"`
}

// NetworkResult is a confirmed network trial.
type NetworkResult struct {
	TryID        string `json:"tryId" yaml:"tryId"`
	ConfirmedVia string `json:"confirmedVia" yaml:"confirmedVia"`
}

// DiagnosticsResult is a stored diagnostics bundle.
type DiagnosticsResult struct {
	SizeBytes int64  `json:"sizeBytes" yaml:"sizeBytes"`
	SHA256    string `json:"sha256" yaml:"sha256"`
}

// phaseName is a task phase as virt-director prints it.
func phaseName(p directorv1.TaskPhase) string {
	switch p {
	case directorv1.TaskPhase_TASK_PHASE_PENDING:
		return "Pending"
	case directorv1.TaskPhase_TASK_PHASE_QUEUED:
		return "Queued"
	case directorv1.TaskPhase_TASK_PHASE_RUNNING:
		return "Running"
	case directorv1.TaskPhase_TASK_PHASE_SUCCEEDED:
		return "Succeeded"
	case directorv1.TaskPhase_TASK_PHASE_FAILED:
		return "Failed"
	case directorv1.TaskPhase_TASK_PHASE_CANCELLED:
		return "Cancelled"
	}
	return "Unknown"
}

// taskPhases are the phases --phase takes, by their printed names.
var taskPhases = []directorv1.TaskPhase{directorv1.TaskPhase_TASK_PHASE_PENDING, directorv1.TaskPhase_TASK_PHASE_QUEUED,
	directorv1.TaskPhase_TASK_PHASE_RUNNING, directorv1.TaskPhase_TASK_PHASE_SUCCEEDED, directorv1.TaskPhase_TASK_PHASE_FAILED,
	directorv1.TaskPhase_TASK_PHASE_CANCELLED}

// terminal says whether a task in phase p has ended.
func terminal(p directorv1.TaskPhase) bool {
	switch p {
	case directorv1.TaskPhase_TASK_PHASE_SUCCEEDED, directorv1.TaskPhase_TASK_PHASE_FAILED, directorv1.TaskPhase_TASK_PHASE_CANCELLED:
		return true
	}
	return false
}

// reasonName is a failure reason without its prefix: DEADLINE_EXCEEDED.
func reasonName(r directorv1.TaskFailureReason) string {
	return strings.TrimPrefix(r.String(), "TASK_FAILURE_REASON_")
}

func taskView(t *directorv1.TaskInfo) Task {
	v := Task{
		ID: t.GetId(), NodeID: t.GetNodeId(), NodeHostname: t.GetNodeHostname(), Kind: t.GetKind(), Summary: t.GetSummary(),
		Phase: phaseName(t.GetPhase()), CreatedAt: rfc3339(msTime(t.GetCreatedAtUnixMs())), CreatedBy: t.GetCreatedBy(),
		Deadline: rfc3339(msTime(t.GetDeadlineUnixMs())), CancelRequested: t.GetCancelRequested(),
		Log: slices.Clone(t.GetLog()), UpdatedAt: rfc3339(msTime(t.GetUpdatedAtUnixMs())), ReplicaID: t.GetReplicaId(),
		DispatchUs: t.GetDispatchUs(),
	}
	if v.Log == nil {
		v.Log = []string{}
	}
	if p := t.GetProgress(); p != nil {
		v.Progress = &TaskProgress{Done: p.GetDone(), Total: p.GetTotal(), Unit: p.GetUnit()}
	}
	if f := t.GetFailure(); f != nil {
		v.Failure = &TaskFailure{Reason: reasonName(f.GetReason()), Message: f.GetMessage(), Fields: []FieldError{}}
		for _, fe := range f.GetFields() {
			v.Failure.Fields = append(v.Failure.Fields, FieldError{Field: fe.GetField(), Value: fe.GetValue(), Message: fe.GetMessage()})
		}
	}
	if r := t.GetResult(); r != nil {
		v.Result = &TaskResult{}
		switch {
		case r.GetVm() != nil:
			x := r.GetVm()
			v.Result.VM = &VMResult{UID: x.GetUid(), Name: x.GetName(), Phase: x.GetPhase(), StopHow: x.GetStopHow()}
		case r.GetImage() != nil:
			x := r.GetImage()
			v.Result.Image = &ImageResult{Name: x.GetName(), SHA256: x.GetSha256(), SizeBytes: x.GetSizeBytes()}
		case r.GetNetwork() != nil:
			x := r.GetNetwork()
			v.Result.Network = &NetworkResult{TryID: x.GetTryId(), ConfirmedVia: x.GetConfirmedVia()}
		case r.GetDiagnostics() != nil:
			x := r.GetDiagnostics()
			v.Result.Diagnostics = &DiagnosticsResult{SizeBytes: x.GetSizeBytes(), SHA256: x.GetSha256()}
		}
	}
	return v
}

// taskPhase is the PHASE column: the phase, a failure's reason, a
// requested cancel.
func taskPhase(t *directorv1.TaskInfo) string {
	s := phaseName(t.GetPhase())
	if f := t.GetFailure(); f != nil && t.GetPhase() == directorv1.TaskPhase_TASK_PHASE_FAILED {
		s += " (" + reasonName(f.GetReason()) + ")"
	}
	if t.GetCancelRequested() && !terminal(t.GetPhase()) {
		s += " (cancel requested)"
	}
	return s
}

// taskNode is a task's node in a table: its hostname, else its short id.
func taskNode(t *directorv1.TaskInfo) string {
	return cmp.Or(t.GetNodeHostname(), shortID(t.GetNodeId()), "-")
}

// sortTasks orders tasks newest first, then by id.
func sortTasks(tasks []*directorv1.TaskInfo) []*directorv1.TaskInfo {
	out := slices.Clone(tasks)
	slices.SortStableFunc(out, func(a, b *directorv1.TaskInfo) int {
		return cmp.Or(cmp.Compare(b.GetCreatedAtUnixMs(), a.GetCreatedAtUnixMs()), cmp.Compare(a.GetId(), b.GetId()))
	})
	return out
}

// renderTaskList writes `task list`: the table, or an array of Task.
func renderTaskList(w io.Writer, format string, tasks []*directorv1.TaskInfo, c clock) error {
	tasks = sortTasks(tasks)
	views := make([]Task, 0, len(tasks))
	for _, t := range tasks {
		views = append(views, taskView(t))
	}
	return render(w, format, views, func(w io.Writer) error {
		fmt.Fprintln(w, "ID\tNODE\tSUMMARY\tPHASE\tCREATED\tUPDATED")
		for _, t := range tasks {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", shortID(t.GetId()), taskNode(t), cmp.Or(t.GetSummary(), t.GetKind(), "-"), taskPhase(t),
				c.ago(msTime(t.GetCreatedAtUnixMs())), c.ago(msTime(t.GetUpdatedAtUnixMs())))
		}
		return nil
	})
}

// progressText is a task's progress in words: "4.0 MiB of 12.0 MiB (33%)".
func progressText(p *directorv1.Progress) string {
	if p == nil {
		return "-"
	}
	num := func(n int64) string {
		if p.GetUnit() == "bytes" {
			return bytesIEC(uint64(max(n, 0)))
		}
		if p.GetUnit() == "" {
			return fmt.Sprint(n)
		}
		return fmt.Sprintf("%d %s", n, p.GetUnit())
	}
	if p.GetTotal() <= 0 {
		return num(p.GetDone())
	}
	return fmt.Sprintf("%s of %s (%d%%)", num(p.GetDone()), num(p.GetTotal()), p.GetDone()*100/p.GetTotal())
}

// resultText is a result in words.
func resultText(r *directorv1.TaskResult) string {
	switch {
	case r.GetVm() != nil:
		x := r.GetVm()
		s := fmt.Sprintf("VM %s (%s) %s", orDash(x.GetName()), orDash(x.GetUid()), orDash(x.GetPhase()))
		if x.GetStopHow() != "" {
			s += ", stopped by " + x.GetStopHow()
		}
		return s
	case r.GetImage() != nil:
		x := r.GetImage()
		return fmt.Sprintf("image %s, %s, sha256 %s", x.GetName(), bytesIEC(uint64(max(x.GetSizeBytes(), 0))), orDash(x.GetSha256()))
	case r.GetNetwork() != nil:
		x := r.GetNetwork()
		return fmt.Sprintf("network try %s confirmed via %s", orDash(x.GetTryId()), orDash(x.GetConfirmedVia()))
	case r.GetDiagnostics() != nil:
		x := r.GetDiagnostics()
		return fmt.Sprintf("diagnostics bundle, %s, sha256 %s (virt-director task run ... -O FILE saves it)", bytesIEC(uint64(max(x.GetSizeBytes(), 0))), orDash(x.GetSha256()))
	}
	return "-"
}

// failureText is a failure in words: "DEADLINE_EXCEEDED: message", and a
// line for each refused field.
func failureText(f *directorv1.TaskFailure) string {
	var b strings.Builder
	b.WriteString(reasonName(f.GetReason()))
	if f.GetMessage() != "" {
		b.WriteString(": " + f.GetMessage())
	}
	for _, fe := range f.GetFields() {
		fmt.Fprintf(&b, "\n  %s", fe.GetField())
		if fe.GetValue() != "" {
			fmt.Fprintf(&b, " %q", fe.GetValue())
		}
		fmt.Fprintf(&b, ": %s", fe.GetMessage())
	}
	return b.String()
}

// renderTaskShow writes one task: `task show`, `task cancel` and what
// `task run --wait` ends with.
func renderTaskShow(w io.Writer, format string, t *directorv1.TaskInfo, c clock) error {
	return render(w, format, taskView(t), func(w io.Writer) error {
		line := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, v) }
		line("ID", t.GetId())
		node := taskNode(t)
		if t.GetNodeHostname() != "" && t.GetNodeId() != "" {
			node += " (" + t.GetNodeId() + ")"
		}
		line("Node", node)
		line("Kind", orDash(t.GetKind()))
		line("Summary", orDash(t.GetSummary()))
		line("Phase", taskPhase(t))
		created := c.stamp(msTime(t.GetCreatedAtUnixMs()))
		if t.GetCreatedBy() != "" {
			created += " by " + t.GetCreatedBy()
		}
		line("Created", created)
		if dl := msTime(t.GetDeadlineUnixMs()); !dl.IsZero() {
			if terminal(t.GetPhase()) {
				line("Deadline", c.stamp(dl))
			} else {
				line("Deadline", fmt.Sprintf("%s (%s)", c.stamp(dl), c.in(dl)))
			}
		}
		if up := msTime(t.GetUpdatedAtUnixMs()); !up.IsZero() {
			line("Updated", fmt.Sprintf("%s (%s)", c.stamp(up), c.ago(up)))
		}
		if t.GetProgress() != nil {
			line("Progress", progressText(t.GetProgress()))
		}
		if t.GetResult() != nil {
			line("Result", resultText(t.GetResult()))
		}
		if f := t.GetFailure(); f != nil {
			line("Failure", failureText(f))
		}
		if t.GetReplicaId() != "" {
			line("Replica", t.GetReplicaId())
		}
		if us := t.GetDispatchUs(); us > 0 {
			line("Dispatch", (time.Duration(us) * time.Microsecond).String())
		}
		if len(t.GetLog()) > 0 {
			fmt.Fprintln(w, "\nLog:")
			for _, l := range t.GetLog() {
				fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(l, "\t", " "))
			}
		}
		return nil
	})
}
