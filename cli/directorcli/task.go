package directorcli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/internal/atomicfile"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/output"
)

func newTaskCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Run typed tasks on nodes, list, show and cancel them",
		Long: `A task is one typed operation for one node (create-vm, start-vm, stop-vm,
reboot-vm, delete-vm, pull-image, apply-network, collect-diagnostics), never a
command line: the node's agent runs it through the same host services virt
calls, and refuses a kind it does not advertise. A task has a UUID, a deadline
and a cancel; its phases are Pending (stored, not yet taken by the node),
Queued, Running, then Succeeded, Failed (with a reason) or Cancelled.`,
	}
	cmd.AddCommand(newTaskRunCmd(env), newTaskListCmd(env), newTaskShowCmd(env), newTaskCancelCmd(env))
	return cmd
}

func newTaskRunCmd(env *Env) *cobra.Command {
	o := &taskRunOptions{}
	var kinds strings.Builder
	for _, k := range kindSpecs {
		fmt.Fprintf(&kinds, "  %s\n      %s\n", k.usage(), k.short)
	}
	cmd := &cobra.Command{
		Use:   "run NODE KIND [ARGS]",
		Short: "Run a task on a node (--wait: until it ends)",
		Long: `Run a task on NODE (a node id, a unique prefix of one, or a hostname). KIND and
its arguments and flags:

` + kinds.String() + `
A kind's flag given to another kind is a usage error. The task's deadline
(--deadline, delivery included) defaults to the kind's: 5m (stop-vm: its
--timeout + 1m), create-vm 30m, pull-image 2h, apply-network its trial + 2m,
collect-diagnostics 10m.

Without --wait the task's id is printed and the command ends once the director
has stored the task. With --wait its progress and log lines go to stderr as
they come and the task as it ended goes to stdout (-o json: an object, as task
show prints it); the exit code is 0 when it Succeeded, 1 when it Failed or was
Cancelled. An interrupted --wait leaves the task running.

If the director cannot say whether it stored the task (its etcd cluster has no
quorum, or the answer was lost), the error says so: look with task show ID, or
run the same command again with --id ID (a task id is stored once).`,
		Args: cobra.MinimumNArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 1 {
				return kindNames(), cobra.ShellCompDirectiveNoFileComp
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.taskRun(cmd, o, args)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&o.Wait, "wait", false, "wait for the task to end: progress to stderr, the task to stdout, exit 1 unless it Succeeded")
	fl.Var(duration.NewValue(&o.Deadline, 0), "deadline", "the task may take `D`, delivery included (default: the kind's)")
	fl.StringVar(&o.ID, "id", "", "the task's `UUID` (default: a new one); again after an ambiguous failure, the task runs at most once")
	fl.StringVarP(&o.File, "file", "f", "", "create-vm, apply-network: the manifest `FILE` (- for stdin)")
	fl.Var(duration.NewValue(&o.Timeout, 0), "timeout", "stop-vm: the guest has `D` to power off after the ACPI power button (default: the host's, 60s); 0: no button, QEMU is ended at once")
	fl.BoolVar(&o.Force, "force", false, "stop-vm: end QEMU (quit, then SIGKILL) if the guest has not powered off by the end of --timeout, else it is left running and the task fails; delete-vm: stop a running VM first")
	fl.StringVar(&o.Name, "name", "", "pull-image: the image's `NAME` in the node's store")
	fl.StringVar(&o.SHA256, "sha256", "", "pull-image: the sha256 (`HEX`) the download must have")
	fl.Var(duration.NewValue(&o.Trial, 0), "trial", "apply-network: the node has `D` to reconnect over the new configuration before it rolls back (default 2m)")
	fl.StringVarP(&o.OutFile, "output-file", "O", "", "collect-diagnostics with --wait: save the bundle to `FILE` (0600)")
	fl.BoolVar(&o.FreshProbe, "fresh-probe", false, "collect-diagnostics: rerun the host's checks")
	for _, f := range []string{"deadline", "timeout", "trial"} {
		fl.Lookup(f).DefValue = "" // their defaults are in their words
	}
	_ = cmd.MarkFlagFilename("file", "yaml", "yml")
	return cmd
}

// taskRequest checks task run's command line and makes its request,
// before anything is asked of the director.
func (e *Env) taskRequest(cmd *cobra.Command, o *taskRunOptions, args []string) (*directorv1.CreateTaskRequest, *kindSpec, error) {
	node, kindName, rest := args[0], args[1], args[2:]
	if strings.TrimSpace(node) == "" {
		return nil, nil, &UsageError{errors.New("task run: empty NODE")}
	}
	k, err := findKind(kindName)
	if err != nil {
		return nil, nil, err
	}
	if err := k.check(rest, cmd.Flags().Changed); err != nil {
		return nil, nil, err
	}
	switch {
	case o.Deadline < 0 || cmd.Flags().Changed("deadline") && o.Deadline == 0:
		return nil, nil, &UsageError{fmt.Errorf("--deadline %s: want more than 0", o.Deadline)}
	case o.Deadline > maxTaskDeadline:
		return nil, nil, &UsageError{fmt.Errorf("--deadline %s: at most %s (tasks are kept a week)", o.Deadline, short(maxTaskDeadline))}
	case o.Timeout < 0:
		return nil, nil, &UsageError{fmt.Errorf("--timeout %s: must not be negative", o.Timeout)}
	case o.Trial < 0:
		return nil, nil, &UsageError{fmt.Errorf("--trial %s: must not be negative", o.Trial)}
	case cmd.Flags().Changed("output-file") && !o.Wait:
		return nil, nil, &UsageError{errors.New("-O: only with --wait (the bundle is fetched once the task has succeeded)")}
	}
	if cmd.Flags().Changed("output-file") {
		if err := checkOutFile(o.OutFile); err != nil {
			return nil, nil, err
		}
	}
	id := uuid.NewString()
	if o.ID != "" {
		u, err := uuid.Parse(o.ID)
		if err != nil || len(o.ID) != 36 {
			return nil, nil, &UsageError{fmt.Errorf("--id %q: want a UUID (as task run printed it)", o.ID)}
		}
		id = u.String()
	}
	in := kindInput{args: rest, o: o, timeoutSet: cmd.Flags().Changed("timeout")}
	if slices.Contains(k.flags, "file") {
		want := "VirtualMachine"
		if k.name == "apply-network" {
			want = "HostNetwork"
		}
		if in.body, err = readTaskFile(o.File, e.IO.In, want); err != nil {
			return nil, nil, err
		}
	}
	task, err := k.build(in)
	if err != nil {
		return nil, nil, err
	}
	task.Id = id
	deadline := o.Deadline
	if deadline == 0 {
		deadline = k.deadline(o)
	}
	task.DeadlineInMs = deadline.Milliseconds()
	return &directorv1.CreateTaskRequest{Node: node, Task: task}, k, nil
}

func (e *Env) taskRun(cmd *cobra.Command, o *taskRunOptions, args []string) error {
	req, k, err := e.taskRequest(cmd, o, args)
	if err != nil {
		return err
	}
	id := req.GetTask().GetId()
	op := "task run " + args[0] + " " + k.name
	ctx := cmd.Context()
	admin := e.Admin()
	if !o.Wait {
		if _, err := admin.CreateTask(ctx, connect.NewRequest(req)); err != nil {
			return e.wordCreateError(op, id, err)
		}
		return render(e.IO.Out, e.Output, map[string]string{"id": id}, func(w io.Writer) error {
			fmt.Fprintln(w, id)
			return nil
		})
	}

	// The watch is opened first: a task that ends at once still ends on
	// it. The director answers a watch of a task to come with its headers
	// once it watches; one that sends none is given watchOpenWait.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type opened struct {
		s   *connect.ServerStreamForClient[directorv1.TaskInfo]
		err error
	}
	watch := make(chan opened, 1)
	go func() {
		s, err := admin.WatchTask(wctx, connect.NewRequest(&directorv1.WatchTaskRequest{Id: id}))
		watch <- opened{s, err}
	}()
	var stream *connect.ServerStreamForClient[directorv1.TaskInfo]
	select {
	case w := <-watch:
		if w.err != nil {
			return e.wordError(op, w.err)
		}
		stream = w.s
	case <-time.After(watchOpenWait):
	case <-ctx.Done():
		return ctx.Err()
	}
	created, err := admin.CreateTask(ctx, connect.NewRequest(req))
	if err != nil {
		return e.wordCreateError(op, id, err)
	}
	if stream == nil {
		select {
		case w := <-watch:
			if w.err != nil {
				return e.wordError(op, w.err)
			}
			stream = w.s
		case <-ctx.Done():
			return fmt.Errorf("interrupted: task %s goes on (virt-director task show %s; task cancel %s stops it): %w", id, id, id, ctx.Err())
		}
	}
	defer stream.Close()
	fmt.Fprintf(e.IO.ErrOut, "task %s: %s on %s\n", id, phaseName(created.Msg.GetTask().GetPhase()), taskNode(created.Msg.GetTask()))

	p := &progressPrinter{w: output.TextOnly(e.IO.ErrOut), id: id, phase: created.Msg.GetTask().GetPhase()}
	var last *directorv1.TaskInfo
	for stream.Receive() {
		last = stream.Msg()
		p.show(last)
		if terminal(last.GetPhase()) {
			break
		}
	}
	if last == nil || !terminal(last.GetPhase()) {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: task %s goes on (virt-director task show %s; task cancel %s stops it): %w", id, id, id, ctx.Err())
		}
		// the watch ended early (a director restart): ask once more
		got, gerr := admin.GetTask(ctx, connect.NewRequest(&directorv1.GetTaskRequest{Id: id}))
		if gerr != nil || !terminal(got.Msg.GetTask().GetPhase()) {
			why := "the director ended the watch"
			if serr := stream.Err(); serr != nil {
				why = e.wordError("watch", serr).Error()
			}
			return fmt.Errorf("task %s: %s before the task ended; it goes on: virt-director task show %s", id, why, id)
		}
		last = got.Msg.GetTask()
	}
	if err := renderTaskShow(e.IO.Out, e.Output, last, e.clock()); err != nil {
		return err
	}
	switch last.GetPhase() {
	case directorv1.TaskPhase_TASK_PHASE_FAILED:
		return &taskEndError{msg: fmt.Sprintf("task %s failed: %s", id, failureText(last.GetFailure()))}
	case directorv1.TaskPhase_TASK_PHASE_CANCELLED:
		msg := fmt.Sprintf("task %s cancelled", id)
		if m := last.GetFailure().GetMessage(); m != "" {
			msg += ": " + m
		}
		return &taskEndError{msg: msg}
	}
	if o.OutFile != "" {
		return e.saveTaskData(ctx, last, o.OutFile)
	}
	return nil
}

// watchOpenWait is how long task run --wait waits for its watch to be
// open before it creates the task.
const watchOpenWait = 2 * time.Second

// taskEndError is a task that ended other than Succeeded (exit 1).
type taskEndError struct{ msg string }

func (e *taskEndError) Error() string { return e.msg }

// wordCreateError words a CreateTask failure. A director that is not
// running stored nothing; any other failure to hear its answer
// (Unavailable: etcd without quorum; a deadline; a cut connection) may
// have stored the task all the same.
func (e *Env) wordCreateError(op, id string, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeInternal, connect.CodeAborted:
	default:
		return e.wordError(op, err)
	}
	if _, serr := os.Stat(e.Socket()); errors.Is(serr, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrPermission) {
		return e.wordError(op, err)
	}
	msg := ce.Message()
	if msg == "" {
		msg = ce.Code().String()
	}
	return &remoteError{msg: fmt.Sprintf("%s: %s: the task may or may not be stored: virt-director task show %s (or run the same again with --id %s)",
		op, msg, id, id), err: err}
}

// progressPrinter writes a watched task's changes to stderr: its phase,
// its progress when it moves, its new log lines.
type progressPrinter struct {
	w        io.Writer
	id       string
	phase    directorv1.TaskPhase
	progress string
	log      []string
}

func (p *progressPrinter) show(t *directorv1.TaskInfo) {
	if t.GetPhase() != p.phase && !terminal(t.GetPhase()) {
		fmt.Fprintf(p.w, "task %s: %s\n", p.id, phaseName(t.GetPhase()))
	}
	p.phase = t.GetPhase()
	if t.GetProgress() != nil {
		if s := progressText(t.GetProgress()); s != p.progress {
			fmt.Fprintf(p.w, "  progress: %s\n", s)
			p.progress = s
		}
	}
	for _, l := range newLines(p.log, t.GetLog()) {
		fmt.Fprintf(p.w, "  %s\n", l)
	}
	p.log = slices.Clone(t.GetLog())
}

// newLines is what cur (a task's last lines) has that prev had not: cur
// continues the longest tail of prev it begins with.
func newLines(prev, cur []string) []string {
	for k := min(len(prev), len(cur)); k > 0; k-- {
		if slices.Equal(prev[len(prev)-k:], cur[:k]) {
			return cur[k:]
		}
	}
	return cur
}

// saveTaskData fetches a succeeded collect-diagnostics task's bundle into
// path (0600, atomically), checked against the size and sha256 the agent
// reported.
func (e *Env) saveTaskData(ctx context.Context, t *directorv1.TaskInfo, path string) error {
	op := "task " + t.GetId() + ": fetch the bundle"
	stream, err := e.Admin().GetTaskData(ctx, connect.NewRequest(&directorv1.GetTaskDataRequest{Id: t.GetId()}))
	if err != nil {
		return e.wordError(op, err)
	}
	defer stream.Close()
	var buf bytes.Buffer
	for stream.Receive() {
		c := stream.Msg()
		if c.GetOffset() != uint64(buf.Len()) {
			return fmt.Errorf("%s: chunk at offset %d, want %d: nothing saved", op, c.GetOffset(), buf.Len())
		}
		buf.Write(c.GetData())
	}
	if err := stream.Err(); err != nil {
		return e.wordError(op, err)
	}
	if d := t.GetResult().GetDiagnostics(); d != nil {
		sum := sha256.Sum256(buf.Bytes())
		if int64(buf.Len()) != d.GetSizeBytes() || (d.GetSha256() != "" && hex.EncodeToString(sum[:]) != strings.ToLower(d.GetSha256())) {
			return fmt.Errorf("%s: got %d bytes with sha256 %x, the node reported %d bytes with sha256 %s: nothing saved",
				op, buf.Len(), sum, d.GetSizeBytes(), d.GetSha256())
		}
	}
	if err := atomicfile.Write(path, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	fmt.Fprintf(e.IO.ErrOut, "bundle saved to %s (%s)\n", path, bytesIEC(uint64(buf.Len())))
	return nil
}

type taskListOptions struct {
	Node   string
	Phases []string
	Limit  int
}

func newTaskListCmd(env *Env) *cobra.Command {
	o := &taskListOptions{}
	names := make([]string, 0, len(taskPhases))
	for _, p := range taskPhases {
		names = append(names, strings.ToLower(phaseName(p)))
	}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, newest first",
		Long: `List tasks, newest first: ID (its first 8 characters), NODE, SUMMARY (the kind and
its target, never its data), PHASE (with a failure's reason), CREATED, UPDATED.
--node and --phase (` + strings.Join(names, ", ") + `; repeated or comma-separated)
narrow it. -o json prints an array of objects as task show prints them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &directorv1.ListTasksRequest{}
			for _, s := range o.Phases {
				p, err := parsePhase(s)
				if err != nil {
					return err
				}
				if !slices.Contains(req.Phases, p) {
					req.Phases = append(req.Phases, p)
				}
			}
			if o.Limit < 0 {
				return &UsageError{fmt.Errorf("--limit %d: must not be negative (0: the director's default)", o.Limit)}
			}
			req.Limit = uint32(o.Limit)
			ctx := cmd.Context()
			if o.Node != "" {
				n, err := env.resolveNode(ctx, o.Node)
				if err != nil {
					return err
				}
				req.Node = n.GetId()
			}
			res, err := env.Admin().ListTasks(ctx, connect.NewRequest(req))
			if err != nil {
				return env.wordError("task list", err)
			}
			return renderTaskList(env.IO.Out, env.Output, res.Msg.GetTasks(), env.clock())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Node, "node", "", "only the tasks of `NODE` (id, prefix or hostname)")
	fl.StringSliceVar(&o.Phases, "phase", nil, "only tasks in `PHASE` ("+strings.Join(names, ", ")+")")
	fl.IntVar(&o.Limit, "limit", 0, "at most `N` tasks (0: the director's default)")
	_ = cmd.RegisterFlagCompletionFunc("phase", cobra.FixedCompletions(names, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func parsePhase(s string) (directorv1.TaskPhase, error) {
	var names []string
	for _, p := range taskPhases {
		if strings.EqualFold(strings.TrimSpace(s), phaseName(p)) {
			return p, nil
		}
		names = append(names, strings.ToLower(phaseName(p)))
	}
	return 0, &UsageError{fmt.Errorf("--phase %q: want one of %s", s, strings.Join(names, ", "))}
}

// checkTaskRef refuses what cannot be a task id or a prefix of one.
func checkTaskRef(ref string) error {
	if len(ref) < 4 || len(ref) > 36 || strings.Trim(strings.ToLower(ref), "0123456789abcdef-") != "" {
		return &UsageError{fmt.Errorf("task %q: want a task id or a unique prefix of one (4 characters or more, as task list prints them)", ref)}
	}
	return nil
}

func newTaskShowCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a task: its phase, progress, result or failure, and log",
		Long: `Show a task: its node, kind and summary, phase, times, progress, its result or
why it failed (with the refused fields), and its last 100 log lines. ID is a
task id or a unique prefix of one (4 characters or more).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTaskRef(args[0]); err != nil {
				return err
			}
			res, err := env.Admin().GetTask(cmd.Context(), connect.NewRequest(&directorv1.GetTaskRequest{Id: strings.ToLower(args[0])}))
			if err != nil {
				return env.wordError("task show "+args[0], err)
			}
			return renderTaskShow(env.IO.Out, env.Output, res.Msg.GetTask(), env.clock())
		},
	}
}

func newTaskCancelCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task: a pending one at once, a running one when its node says so",
		Long: `Ask for a task's cancellation. A task the node has not taken yet ends Cancelled at
once; a queued or running one ends when its agent has stopped it (Cancelled, or
Succeeded or Failed if it ended first): task show, or task run --wait, says
which. A task that has ended is left as it is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTaskRef(args[0]); err != nil {
				return err
			}
			res, err := env.Admin().CancelTask(cmd.Context(), connect.NewRequest(&directorv1.CancelTaskRequest{Id: strings.ToLower(args[0])}))
			if err != nil {
				return env.wordError("task cancel "+args[0], err)
			}
			t := res.Msg.GetTask()
			return render(env.IO.Out, env.Output, taskView(t), func(w io.Writer) error {
				switch {
				case terminal(t.GetPhase()):
					fmt.Fprintf(w, "task %s: %s\n", t.GetId(), taskPhase(t))
				default:
					fmt.Fprintf(w, "task %s: cancel requested (%s; task show %s says when it ends)\n", t.GetId(), phaseName(t.GetPhase()), shortID(t.GetId()))
				}
				return nil
			})
		},
	}
}
