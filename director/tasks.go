package director

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/taskkind"
	"github.com/virtcon/virtcon/internal/yamlcheck"
)

// Task limits and defaults.
const (
	// MaxTaskBody bounds a create-vm manifest or an apply-network
	// document.
	MaxTaskBody = 1 << 20
	// DefaultTaskRetention is how long a task's records are kept.
	DefaultTaskRetention = 7 * 24 * time.Hour
	// DefaultTaskSweepEvery is the task sweeper's period.
	DefaultTaskSweepEvery = 5 * time.Second
	// maxTaskLog is how many log lines a task keeps (the last ones).
	maxTaskLog = 100
	// maxLogLine bounds one log line as stored.
	maxLogLine = 1000
	// MaxTaskData bounds a task's bulk output (a diagnostics bundle).
	MaxTaskData = 32 << 20
	// taskDataTTL is how long bulk output is kept.
	taskDataTTL = 24 * time.Hour
	// maxTaskDataChunk is the largest chunk an agent may send.
	maxTaskDataChunk = 256 << 10
	// defaultTrial is apply-network's trial when the task names none.
	defaultTrial = 120 * time.Second
)

// Task kinds as the CLI spells them.
const (
	KindCreateVM           = taskkind.CreateVM
	KindStartVM            = taskkind.StartVM
	KindStopVM             = taskkind.StopVM
	KindRebootVM           = taskkind.RebootVM
	KindDeleteVM           = taskkind.DeleteVM
	KindPullImage          = taskkind.PullImage
	KindApplyNetwork       = taskkind.ApplyNetwork
	KindCollectDiagnostics = taskkind.CollectDiagnostics
)

// taskKind is the CLI's name of t's kind, "" when it has none.
func taskKind(t *directorv1.Task) string { return taskkind.Of(t) }

// defaultDeadline is the time a task of t's kind may take when its
// creator names none.
func defaultDeadline(t *directorv1.Task) time.Duration {
	switch k := t.GetKind().(type) {
	case *directorv1.Task_CreateVm:
		return 30 * time.Minute
	case *directorv1.Task_StopVm:
		return max(5*time.Minute, time.Duration(k.StopVm.GetTimeoutMs())*time.Millisecond+time.Minute)
	case *directorv1.Task_PullImage:
		return 2 * time.Hour
	case *directorv1.Task_ApplyNetwork:
		trial := time.Duration(k.ApplyNetwork.GetTrialMs()) * time.Millisecond
		if trial == 0 {
			trial = defaultTrial
		}
		return trial + 2*time.Minute
	case *directorv1.Task_CollectDiagnostics:
		return 10 * time.Minute
	}
	return 5 * time.Minute
}

// manifestHead is what the director reads of a manifest: its type and
// name. The host's admission judges the rest.
type manifestHead struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
}

// checkBody checks a create-vm or apply-network document: at most
// MaxTaskBody, one YAML document of apiVersion virtcon/v1 and kind
// wantKind. It returns the document's metadata.name.
func checkBody(field string, data []byte, wantKind string) (string, error) {
	if len(data) > MaxTaskBody {
		return "", fmt.Errorf("%s: %d bytes: want at most %d", field, len(data), MaxTaskBody)
	}
	doc, err := yamlcheck.Document(data, "document")
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	var h manifestHead
	if err := doc.Decode(&h); err != nil {
		return "", fmt.Errorf("%s: want a mapping with apiVersion and kind: %s", field, yamlcheck.Message(err))
	}
	if h.APIVersion != "virtcon/v1" {
		return "", fmt.Errorf("%s: apiVersion %q: want virtcon/v1", field, truncate(h.APIVersion, 64))
	}
	if h.Kind != wantKind {
		return "", fmt.Errorf("%s: kind %q: want %s", field, truncate(h.Kind, 64), wantKind)
	}
	return h.Metadata.Name, nil
}

// checkTask checks a task as CreateTask gets it and returns its summary
// ("start-vm web"): never a secret.
func checkTask(t *directorv1.Task) (string, error) {
	if t == nil {
		return "", errors.New("task: missing")
	}
	id, err := uuid.Parse(t.GetId())
	if err != nil || id.String() != t.GetId() {
		return "", fmt.Errorf("task.id %q: want a UUID in lower-case canonical form", truncate(t.GetId(), 64))
	}
	if t.GetDeadlineInMs() < 0 || time.Duration(t.GetDeadlineInMs())*time.Millisecond > DefaultTaskRetention {
		return "", fmt.Errorf("task.deadline_in_ms %d: want 0 (the kind's default) to %d", t.GetDeadlineInMs(), DefaultTaskRetention.Milliseconds())
	}
	vmName := func(field, v string) error {
		if v == "" {
			return fmt.Errorf("%s: want a VM name or UID", field)
		}
		if len(v) > 253 || strings.ContainsAny(v, "\x00\n/") {
			return fmt.Errorf("%s %q: want a VM name or UID", field, truncate(v, 64))
		}
		return nil
	}
	kind := taskKind(t)
	switch k := t.GetKind().(type) {
	case *directorv1.Task_CreateVm:
		name, err := checkBody("task.create_vm.manifest", k.CreateVm.GetManifest(), "VirtualMachine")
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(kind + " " + truncate(name, 64)), nil
	case *directorv1.Task_StartVm:
		return kind + " " + k.StartVm.GetVm(), vmName("task.start_vm.vm", k.StartVm.GetVm())
	case *directorv1.Task_StopVm:
		if k.StopVm.GetTimeoutMs() < 0 {
			return "", fmt.Errorf("task.stop_vm.timeout_ms %d: want >= 0", k.StopVm.GetTimeoutMs())
		}
		return kind + " " + k.StopVm.GetVm(), vmName("task.stop_vm.vm", k.StopVm.GetVm())
	case *directorv1.Task_RebootVm:
		return kind + " " + k.RebootVm.GetVm(), vmName("task.reboot_vm.vm", k.RebootVm.GetVm())
	case *directorv1.Task_DeleteVm:
		return kind + " " + k.DeleteVm.GetVm(), vmName("task.delete_vm.vm", k.DeleteVm.GetVm())
	case *directorv1.Task_PullImage:
		p := k.PullImage
		if p.GetUrl() == "" {
			return "", errors.New("task.pull_image.url: want a URL")
		}
		u, err := url.Parse(p.GetUrl())
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", errors.New("task.pull_image.url: want an http or https URL with a host")
		}
		if u.User != nil {
			// never echoed: the user info is the secret
			return "", errors.New("task.pull_image.url: carries a user name or password, which the director would store and the agent log: serve the image without them, or with a presigned URL (its query is dropped from the director's store when the task ends)")
		}
		if p.GetName() == "" {
			return "", errors.New("task.pull_image.name: want an image name")
		}
		if s := p.GetSha256(); s != "" {
			if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
				return "", fmt.Errorf("task.pull_image.sha256 %q: want 64 hex digits", truncate(s, 80))
			}
		}
		// The URL may carry credentials: the summary names the image only.
		return kind + " " + truncate(p.GetName(), 64), nil
	case *directorv1.Task_ApplyNetwork:
		if _, err := checkBody("task.apply_network.host_network", k.ApplyNetwork.GetHostNetwork(), "HostNetwork"); err != nil {
			return "", err
		}
		if k.ApplyNetwork.GetTrialMs() < 0 {
			return "", fmt.Errorf("task.apply_network.trial_ms %d: want >= 0", k.ApplyNetwork.GetTrialMs())
		}
		return kind, nil
	case *directorv1.Task_CollectDiagnostics:
		return kind, nil
	}
	return "", errors.New("task: no kind (want one of create_vm, start_vm, stop_vm, reboot_vm, delete_vm, pull_image, apply_network, collect_diagnostics)")
}

// taskTTL is how long a task's records are kept from now: the retention
// once it has ended; before, at least until its deadline has passed and
// the sweeper could fail it NOT_DELIVERED. A retention shorter than a
// deadline (--task-retention 1h, a pull's default 2 h) otherwise dropped
// a pending task of an offline node, or a running one quiet that long,
// mid-way: never failed, its result ignored as "a task not stored here".
func (d *Director) taskTTL(deadlineMS int64, ended bool) time.Duration {
	if ended {
		return d.opts.TaskRetention
	}
	return max(d.opts.TaskRetention, d.taskLive(deadlineMS))
}

// taskLive is how long from now a task may still be live: to its
// deadline, the NOT_DELIVERED grace and a sweep's margin.
func (d *Director) taskLive(deadlineMS int64) time.Duration {
	return max(0, fromMS(deadlineMS).Sub(d.now())) + notDeliveredGrace + time.Minute
}

// taskRecord is tasks/<node>/<task>.
type taskRecord struct {
	V        int    `json:"v"`
	ID       string `json:"id"`
	Node     string `json:"node"`
	Hostname string `json:"hostname,omitempty"`
	Kind     string `json:"kind"`
	Summary  string `json:"summary"`
	// Task is the task as created (protojson); a create-vm's manifest is
	// dropped once the task ends (ManifestSHA256 stays).
	Task            json.RawMessage `json:"task"`
	ManifestSHA256  string          `json:"manifestSha256,omitempty"`
	Stripped        bool            `json:"stripped,omitempty"`
	CreatedAt       int64           `json:"createdAt"`
	CreatedBy       string          `json:"createdBy,omitempty"`
	Deadline        int64           `json:"deadline"`
	CancelRequested bool            `json:"cancelRequested,omitempty"`
	// Ended is set once the task is terminal: no replica sends it again.
	Ended bool `json:"ended,omitempty"`
}

func (r *taskRecord) task() (*directorv1.Task, error) {
	var t directorv1.Task
	if err := protojson.Unmarshal(r.Task, &t); err != nil {
		return nil, fmt.Errorf("task record %s: %w", r.ID, err)
	}
	return &t, nil
}

// taskStatusRecord is taskstatus/<node>/<task>: the agent's word, the
// highest seq kept, the first terminal phase final.
type taskStatusRecord struct {
	V        int    `json:"v"`
	Kind     string `json:"kind"`
	Phase    string `json:"phase"`
	Seq      uint64 `json:"seq"`
	Created  int64  `json:"createdAt"`
	Deadline int64  `json:"deadline"`
	// Status is the last TaskStatus (protojson, its log lines in Log).
	Status     json.RawMessage `json:"status,omitempty"`
	Log        []string        `json:"log,omitempty"`
	UpdatedAt  int64           `json:"updatedAt"`
	Replica    string          `json:"replica,omitempty"`
	DispatchUs int64           `json:"dispatchUs,omitempty"`
	// ByDirector says the terminal phase is the director's word
	// (cancelled while pending, not delivered), not the agent's: the
	// task may have reached the agent all the same, and the agent's own
	// terminal status, should one come, replaces it.
	ByDirector bool `json:"byDirector,omitempty"`
}

func (s *taskStatusRecord) phase() directorv1.TaskPhase {
	return directorv1.TaskPhase(directorv1.TaskPhase_value[s.Phase])
}

func (s *taskStatusRecord) status() *directorv1.TaskStatus {
	var st directorv1.TaskStatus
	if len(s.Status) > 0 {
		_ = protojson.Unmarshal(s.Status, &st) // written by us: a bad one shows empty
	}
	return &st
}

func terminal(p directorv1.TaskPhase) bool {
	return p == directorv1.TaskPhase_TASK_PHASE_SUCCEEDED || p == directorv1.TaskPhase_TASK_PHASE_FAILED ||
		p == directorv1.TaskPhase_TASK_PHASE_CANCELLED
}

func taskKey(node, id string) string       { return preTasks + node + "/" + id }
func taskStatusKey(node, id string) string { return preTaskStatus + node + "/" + id }
func taskIDKey(id string) string           { return preTaskIDs + id }
func taskDataPrefix(node, id string) string {
	return preTaskData + node + "/" + id + "/"
}

// taskIDRecord is taskids/<task>: which node a task is for.
type taskIDRecord struct {
	V    int    `json:"v"`
	Node string `json:"node"`
}

// taskDataRecord is one chunk of a task's bulk output.
type taskDataRecord struct {
	V    int    `json:"v"`
	Data []byte `json:"data"`
	Last bool   `json:"last,omitempty"`
}

var protoJSON = protojson.MarshalOptions{}

func marshalProto(m proto.Message) json.RawMessage {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

// info is the task as the admin API shows it. A create-vm's manifest is
// never in it: TaskInfo has no field for the task's body.
func taskInfo(r *taskRecord, s *taskStatusRecord) *directorv1.TaskInfo {
	ti := &directorv1.TaskInfo{
		Id: r.ID, NodeId: r.Node, NodeHostname: r.Hostname, Kind: r.Kind, Summary: r.Summary,
		Phase: directorv1.TaskPhase_TASK_PHASE_PENDING, CreatedAtUnixMs: r.CreatedAt, CreatedBy: r.CreatedBy,
		DeadlineUnixMs: r.Deadline, CancelRequested: r.CancelRequested, UpdatedAtUnixMs: r.CreatedAt,
	}
	if s == nil {
		return ti
	}
	st := s.status()
	ti.Phase = s.phase()
	ti.Progress, ti.Failure, ti.Result = st.GetProgress(), st.GetFailure(), st.GetResult()
	ti.Log = s.Log
	ti.UpdatedAtUnixMs, ti.ReplicaId, ti.DispatchUs = s.UpdatedAt, s.Replica, s.DispatchUs
	return ti
}

// sameTask says whether a retried CreateTask asks for the stored task:
// the same node and the same message (a stripped manifest compared by its
// SHA-256).
func sameTask(r *taskRecord, node string, t *directorv1.Task) bool {
	if r.Node != node {
		return false
	}
	stored, err := r.task()
	if err != nil {
		return false
	}
	want := proto.Clone(t).(*directorv1.Task)
	if cv := want.GetCreateVm(); cv != nil && r.Stripped {
		sum := sha256.Sum256(cv.GetManifest())
		if hex.EncodeToString(sum[:]) != r.ManifestSHA256 {
			return false
		}
		cv.Manifest = nil
		if scv := stored.GetCreateVm(); scv != nil {
			scv.Manifest = nil
		}
	}
	return proto.Equal(stored, want)
}

// stripManifest drops a create-vm's manifest from its record (it may
// hold cloud-init user data, a secret) and a pull-image URL's query (a
// presigned URL's signature) and marks it ended; false when there was
// nothing to change.
func stripManifest(r *taskRecord) bool {
	changed := !r.Ended
	r.Ended = true
	if (r.Kind != KindCreateVM && r.Kind != KindPullImage) || r.Stripped {
		return changed
	}
	t, err := r.task()
	if err != nil {
		// Unreadable: drop it whole rather than keep a secret.
		r.Task, r.Stripped = json.RawMessage(`{}`), true
		return true
	}
	if cv := t.GetCreateVm(); cv != nil {
		cv.Manifest = nil
	}
	if pi := t.GetPullImage(); pi != nil {
		// a presigned URL's query is a credential
		if u, err := url.Parse(pi.GetUrl()); err == nil {
			u.RawQuery, u.Fragment, u.User = "", "", nil
			pi.Url = u.String()
		} else {
			pi.Url = ""
		}
	}
	r.Task, r.Stripped = marshalProto(t), true
	return true
}

// cleanLog is the agent's log lines as stored: each at most maxLogLine
// bytes, no control characters but tabs.
func cleanLog(lines []string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		l = truncate(l, maxLogLine)
		if strings.ContainsFunc(l, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
			var b bytes.Buffer
			for _, r := range l {
				if r < 0x20 && r != '\t' || r == 0x7f {
					r = '?'
				}
				b.WriteRune(r)
			}
			l = b.String()
		}
		out = append(out, l)
	}
	return out
}

// appendLog keeps the last maxTaskLog lines.
func appendLog(tail, lines []string) []string {
	tail = append(tail, cleanLog(lines)...)
	if len(tail) > maxTaskLog {
		tail = append([]string(nil), tail[len(tail)-maxTaskLog:]...)
	}
	return tail
}

// getTask reads a task's two records; a missing task is
// etcdstore.ErrNotFound.
func (d *Director) getTask(ctx context.Context, node, id string) (*taskRecord, int64, *taskStatusRecord, int64, error) {
	var r taskRecord
	rrev, err := d.store.Get(ctx, taskKey(node, id), &r)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	var s taskStatusRecord
	srev, err := d.store.Get(ctx, taskStatusKey(node, id), &s)
	if notFound(err) {
		return &r, rrev, nil, 0, nil
	}
	if err != nil {
		return nil, 0, nil, 0, err
	}
	return &r, rrev, &s, srev, nil
}
