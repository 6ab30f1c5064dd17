package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/vm"
)

// This file (and task_network.go) is the only place the agent calls a
// mutating host method, and only from functions reached from exec's
// switch over a typed task (agent_test.go TestMutationsOnlyInTasks).
// Each kind calls what `virt` calls for the same operation.

// Bounds of a collect-diagnostics bundle and its transfer.
const (
	diagMaxBytes = 32 << 20
	diagChunk    = 256 << 10
	diagInFlight = 4 // chunks sent and not yet acknowledged
)

// exec runs a task of a kind the agent advertises.
func (tr *taskRunner) exec(ctx context.Context, env *taskEnv, lt *liveTask) (*directorv1.TaskResult, error) {
	switch k := lt.t.GetKind().(type) {
	case *directorv1.Task_CreateVm:
		return execCreateVM(ctx, env, k.CreateVm)
	case *directorv1.Task_StartVm:
		return execStartVM(ctx, env, k.StartVm)
	case *directorv1.Task_StopVm:
		return execStopVM(ctx, env, k.StopVm)
	case *directorv1.Task_RebootVm:
		return execRebootVM(ctx, env, k.RebootVm)
	case *directorv1.Task_DeleteVm:
		return execDeleteVM(ctx, env, k.DeleteVm)
	case *directorv1.Task_PullImage:
		return execPullImage(ctx, env, k.PullImage)
	case *directorv1.Task_ApplyNetwork:
		return runApplyNetwork(ctx, env, k.ApplyNetwork) // task_network.go
	case *directorv1.Task_CollectDiagnostics:
		return tr.execCollectDiagnostics(ctx, env, lt, k.CollectDiagnostics)
	}
	return nil, &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_UNSUPPORTED_KIND, Message: "this agent cannot run " + summary(lt.t)}
}

func vmResult(ctx context.Context, env *taskEnv, ref string, how string) *directorv1.TaskResult {
	r := &directorv1.VMResult{StopHow: how}
	if e, err := env.Host.VMs.Peek(ctx, ref); err == nil {
		r.Uid, r.Name, r.Phase = e.UID, e.Name, e.Phase
	} else {
		r.Name = ref
	}
	return &directorv1.TaskResult{Result: &directorv1.TaskResult_Vm{Vm: r}}
}

func execCreateVM(ctx context.Context, env *taskEnv, t *directorv1.CreateVM) (*directorv1.TaskResult, error) {
	v, err := vm.Decode(t.GetManifest())
	if err != nil {
		return nil, err
	}
	created, err := env.Host.VMs.CreateWith(ctx, v, vm.CreateOptions{DirectorGeneration: t.GetDirectorGeneration(), Remote: true})
	if err != nil {
		return nil, err
	}
	return vmResult(ctx, env, created.Metadata.UID, ""), nil
}

func execStartVM(ctx context.Context, env *taskEnv, t *directorv1.StartVM) (*directorv1.TaskResult, error) {
	if err := env.Host.VMs.StartWith(ctx, t.GetVm(), vm.StartOptions{}); err != nil {
		return nil, err
	}
	return vmResult(ctx, env, t.GetVm(), ""), nil
}

func execStopVM(ctx context.Context, env *taskEnv, t *directorv1.StopVM) (*directorv1.TaskResult, error) {
	res, err := env.Host.VMs.PowerOff(ctx, t.GetVm(), stopOptions(t))
	if err != nil {
		return nil, err
	}
	env.Log.Info("vm stopped", "vm", t.GetVm(), "how", res.How, "took", res.Took.Round(time.Millisecond))
	return vmResult(ctx, env, t.GetVm(), res.How), nil
}

// stopOptions is the stop the task asks for, as the proto defines its
// fields: force ends QEMU after the grace (it no longer skips the power
// button: an old director meant the grace, as its help said), now skips
// the button and the grace.
func stopOptions(t *directorv1.StopVM) vm.StopOptions {
	return vm.StopOptions{Timeout: time.Duration(t.GetTimeoutMs()) * time.Millisecond, Force: t.GetForce(), Now: t.GetNow()}
}

func execRebootVM(ctx context.Context, env *taskEnv, t *directorv1.RebootVM) (*directorv1.TaskResult, error) {
	if err := env.Host.VMs.Reboot(ctx, t.GetVm()); err != nil {
		return nil, err
	}
	env.Log.Info("vm reset", "vm", t.GetVm())
	return vmResult(ctx, env, t.GetVm(), ""), nil
}

func execDeleteVM(ctx context.Context, env *taskEnv, t *directorv1.DeleteVM) (*directorv1.TaskResult, error) {
	// the result names what was deleted: read before it is gone
	res := vmResult(ctx, env, t.GetVm(), "")
	if err := env.Host.VMs.Delete(ctx, t.GetVm(), t.GetForce()); err != nil {
		return nil, err
	}
	res.GetVm().Phase = ""
	return res, nil
}

func execPullImage(ctx context.Context, env *taskEnv, t *directorv1.PullImage) (*directorv1.TaskResult, error) {
	progress := func(p vm.Progress) { env.Progress(p.Bytes, p.Total, "bytes") }
	img, err := env.Host.VMs.PullImage(ctx, t.GetUrl(), t.GetName(), t.GetSha256(), progress)
	var exists *vm.ImageExistsError
	switch {
	case errors.As(err, &exists):
		// a pull of the same bytes that already happened (a redelivery
		// after a lost journal): done; anything else under the name is
		// a conflict
		want := strings.ToLower(strings.TrimSpace(t.GetSha256()))
		if imgs, lerr := env.Host.VMs.ListImages(ctx); lerr == nil && want != "" {
			for _, have := range imgs {
				if have.Name == t.GetName() && have.SHA256 == want {
					env.Log.Info("image already in the store with this sha256", "image", have.Name)
					return imageResult(&have), nil
				}
			}
		}
		return nil, err
	case err != nil && ctx.Err() == nil && isDownloadError(err):
		return nil, &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_DOWNLOAD, Message: err.Error()}
	case err != nil:
		return nil, err
	}
	env.Log.Info("image pulled", "image", img.Name, "sha256", img.SHA256, "bytes", img.SizeBytes)
	return imageResult(img), nil
}

// isDownloadError: the transfer failed (the vm package words those
// "download URL: ..."), not the store.
func isDownloadError(err error) bool {
	return !errors.Is(err, vm.ErrChecksum) && strings.Contains(err.Error(), ": download ")
}

func imageResult(img *vm.Image) *directorv1.TaskResult {
	return &directorv1.TaskResult{Result: &directorv1.TaskResult_Image{Image: &directorv1.ImageResult{Name: img.Name, Sha256: img.SHA256, SizeBytes: img.SizeBytes}}}
}

// execCollectDiagnostics writes the redacted bundle into AgentStateDir
// and streams it as TaskData, at most diagInFlight chunks unacknowledged;
// after a new session it starts again from the last acknowledged offset.
// The file goes once the transfer ends, however it ends.
func (tr *taskRunner) execCollectDiagnostics(ctx context.Context, env *taskEnv, lt *liveTask, t *directorv1.CollectDiagnostics) (*directorv1.TaskResult, error) {
	dir := filepath.Join(env.Host.Layout.AgentStateDir(), "diag")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, lt.id+".tar.gz")
	defer removeQuiet(tr.log, path)
	if _, err := env.Host.Diag.Write(ctx, path, t.GetFreshProbe()); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) > diagMaxBytes {
		return nil, &taskFailure{Reason: directorv1.TaskFailureReason_TASK_FAILURE_REASON_TOO_LARGE,
			Message: fmt.Sprintf("the diagnostics bundle is %d bytes, over the %d MiB a director takes", len(data), diagMaxBytes>>20)}
	}
	sum := sha256.Sum256(data)
	env.Log.Info("diagnostics bundle written", "bytes", len(data))
	if err := tr.sendData(ctx, env, lt, data); err != nil {
		return nil, err
	}
	return &directorv1.TaskResult{Result: &directorv1.TaskResult_Diagnostics{Diagnostics: &directorv1.DiagnosticsResult{
		SizeBytes: int64(len(data)), Sha256: hex.EncodeToString(sum[:])}}}, nil
}

// sendData streams data as lt's TaskData until the director has
// acknowledged all of it.
func (tr *taskRunner) sendData(ctx context.Context, env *taskEnv, lt *liveTask, data []byte) error {
	acks := make(chan uint64, 2*diagInFlight)
	tr.mu.Lock()
	lt.acks = acks
	tr.mu.Unlock()
	size := uint64(len(data))
	var acked, sent uint64
	send := func() {
		for sent < size && sent < acked+diagInFlight*diagChunk {
			end := min(sent+diagChunk, size)
			tr.out.push(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskData{TaskData: &directorv1.TaskData{
				TaskId: lt.id, Offset: sent, Data: data[sent:end], Last: end == size}}})
			sent = end
		}
	}
	// taken before the first chunk goes: a session that comes up after
	// it closes this channel, and what was in flight is sent again
	newSession := tr.newSession()
	send()
	for acked < size {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case off := <-acks:
			if off > acked && off <= size {
				acked = off
				env.Progress(int64(acked), int64(size), "bytes")
			}
		case <-newSession:
			newSession = tr.newSession()
			sent = acked // what was in flight may be lost with the old session
		}
		send()
	}
	return nil
}
