//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/director/loadgen"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// Director tasks end to end, every part real and in its own process:
// virt-director serve, virt agent run on a host of its own (--root), QEMU
// test guests. Each task goes through `virt-director task run … --wait
// -o json` and is checked against `virt --root R vm list -o json`.

// dirTask is the part of task run --wait -o json the test reads.
type dirTask struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Summary string `json:"summary"`
	Phase   string `json:"phase"`
	Failure *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"failure"`
	Result *struct {
		VM *struct {
			UID     string `json:"uid"`
			Name    string `json:"name"`
			Phase   string `json:"phase"`
			StopHow string `json:"stopHow"`
		} `json:"vm"`
	} `json:"result"`
	Log []string `json:"log"`
}

// dirVM is the part of virt-director vm list -o json the test reads.
type dirVM struct {
	Node               string  `json:"node"`
	NodeID             string  `json:"nodeId"`
	UID                string  `json:"uid"`
	Name               string  `json:"name"`
	Class              string  `json:"class"`
	Phase              string  `json:"phase"`
	Generation         int64   `json:"generation"`
	DirectorGeneration *string `json:"directorGeneration"`
}

// enrolHost enrols the host at root with the director on data and
// returns its node id.
func enrolHost(t *testing.T, vd, data, root string) string {
	t.Helper()
	var created struct {
		JoinString string `json:"joinString"`
	}
	if err := json.Unmarshal([]byte(vdir(t, vd, data, "token", "create", "-o", "json")), &created); err != nil {
		t.Fatalf("token create -o json: %v", err)
	}
	joinFile := filepath.Join(root, "join.txt")
	if err := os.WriteFile(joinFile, []byte(created.JoinString+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := virt(t, nil, "--root", root, "agent", "enroll", "--join-file", joinFile, "-o", "json")
	if r.code != 0 {
		t.Fatalf("virt agent enroll: exit %d\nstderr: %s", r.code, r.stderr)
	}
	var st agent.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.NodeID == "" {
		t.Fatalf("virt agent enroll -o json: %v: %s", err, r.stdout)
	}
	return st.NodeID
}

// followEvents runs virt vm events NAME --follow -o json until the VM's
// QEMU exits (the agent's inventory holds the other events socket) and
// returns a function that waits for that and gives the events.
func followEvents(t *testing.T, root, name string) func() []vm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := exec.CommandContext(ctx, virtBin, "--root", root, "vm", "events", name, "--follow", "-o", "json")
	var stdout, stderr testutil.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "following the events of "+name); {
		if time.Now().After(deadline) {
			t.Fatalf("virt vm events %s: not following after 30s; stderr: %s", name, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func() []vm.Event {
		t.Helper()
		if err := cmd.Wait(); err != nil {
			t.Errorf("virt vm events %s --follow: %v (it exits 0 when the VM's QEMU does); stderr: %s", name, err, stderr.String())
		}
		var got []vm.Event
		for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			var e vm.Event
			if line == "" {
				continue
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("virt vm events %s: line %q: %v", name, line, err)
			}
			got = append(got, e)
		}
		return got
	}
}

// runIn runs bin with stdin.
func runIn(t *testing.T, stdin, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut strings.Builder
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %s: %v", bin, strings.Join(args, " "), err)
	}
	return r
}

func TestIntegrationDirectorTasksVM(t *testing.T) {
	g := requireGuest(t)
	vd := requireDirector(t)
	root := vmRoot(t)
	layout := paths.New(root)
	data, err := os.MkdirTemp("", "vd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	logs := t.TempDir()
	addr := freeLoopback(t)

	dir := startDirector(t, vd, data, addr, filepath.Join(logs, "director.log"))
	dir.waitOutput(t, "virt-director: serving on", 60*time.Second)
	node := enrolHost(t, vd, data, root)
	startChild(t, "virt agent run", filepath.Join(logs, "agent.log"), virtBin, "--root", root, "agent", "run")
	waitNode(t, vd, data, node, 30*time.Second, "Ready and connected", func(n dirNode) bool { return n.State == "Ready" && n.Connected })
	host := nodeOf(t, vd, data, node).Hostname

	// A remote manifest boots only files in the host's image store: they
	// go in as an operator would put them, with virt image import (a
	// file copied in without its sha256 marker is an incomplete image,
	// ORPHANED, which vm gc removes).
	images := layout.ImagesDir()
	for name, file := range map[string]string{"vmlinux": g.kernel, "initrd": g.initrd, "initrd-deaf": g.deaf} {
		v(t, root, "image", "import", file, "--name", name)
	}
	kernel, initrd, deaf := filepath.Join(images, "vmlinux.img"), filepath.Join(images, "initrd.img"), filepath.Join(images, "initrd-deaf.img")
	for _, f := range []string{kernel, initrd, deaf} {
		if !fileExists(f) {
			t.Fatalf("virt image import made no %s", f)
		}
	}
	manifest := func(name, kernel, initrd string) string {
		p := filepath.Join(logs, name+".yaml")
		doc := fmt.Sprintf(`apiVersion: virtcon/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  memoryMiB: 256
  boot:
    kernel: %s
    initrd: %s
    cmdline: console=ttyS0 quiet
`, name, kernel, initrd)
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// task runs `virt-director task run NODE args... --wait -o json`.
	task := func(target string, args ...string) (dirTask, result) {
		t.Helper()
		full := append([]string{"--data", data, "task", "run", target}, args...)
		full = append(full, "--wait", "-o", "json")
		r := run(t, nil, vd, full...)
		var tk dirTask
		if r.stdout != "" {
			if err := json.Unmarshal([]byte(r.stdout), &tk); err != nil {
				t.Fatalf("task run %s: stdout not a task: %v\n%s", strings.Join(args, " "), err, r.stdout)
			}
		}
		t.Logf("task run %s %s: exit %d, %s in %v", target, strings.Join(args, " "), r.code, tk.Phase, r.elapsed.Round(time.Millisecond))
		return tk, r
	}
	succeeded := func(target string, args ...string) dirTask {
		t.Helper()
		tk, r := task(target, args...)
		if r.code != 0 || tk.Phase != "Succeeded" {
			t.Fatalf("task run %s %s: exit %d, phase %q, failure %+v; want 0 and Succeeded\nstderr: %s",
				target, strings.Join(args, " "), r.code, tk.Phase, tk.Failure, r.stderr)
		}
		return tk
	}
	local := func(name string) (vm.Entry, bool) {
		t.Helper()
		e, ok := listVMs(t, root)[name]
		return e, ok
	}
	// directorVM waits until the director's inventory shows name as ok.
	directorVM := func(name, what string, ok func(v dirVM, found bool) bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			var vms []dirVM
			out := vdir(t, vd, data, "vm", "list", "--node", node, "-o", "json")
			if err := json.Unmarshal([]byte(out), &vms); err != nil {
				t.Fatalf("vm list -o json: %v\n%s", err, out)
			}
			var v dirVM
			found := false
			for _, x := range vms {
				if x.Name == name {
					v, found = x, true
				}
			}
			if ok(v, found) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("virt-director vm list: %s not %s within 15s:\n%s", name, what, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// create-vm from a manifest: the VM exists on the host, stopped,
	// stamped with the director's generation.
	created := succeeded(node, "create-vm", "-f", manifest("web", kernel, initrd))
	web, ok := local("web")
	if !ok || web.Class != vm.ClassManaged || web.Phase != vm.PhaseStopped {
		t.Fatalf("virt vm list after create-vm: web %+v (listed %v); want MANAGED and Stopped", web, ok)
	}
	if created.Result == nil || created.Result.VM == nil || created.Result.VM.UID != web.UID {
		t.Errorf("create-vm result %+v; want the VM's uid %s", created.Result, web.UID)
	}
	if web.DirectorGeneration != "1" {
		t.Errorf("web after create-vm: director generation %q; want 1 (virt vm list: %+v)", web.DirectorGeneration, web)
	}
	directorVM("web", "listed, MANAGED, Stopped, director generation 1", func(v dirVM, found bool) bool {
		return found && v.UID == web.UID && v.Class == vm.ClassManaged && v.Phase == vm.PhaseStopped &&
			v.DirectorGeneration != nil && *v.DirectorGeneration == "1"
	})

	// The two generations: a local edit (virt vm show | virt apply, the
	// round trip carrying the director's label) bumps the host's
	// generation only; the director sees it as such, not as drift.
	shown := v(t, root, "vm", "show", "web", "-o", "yaml")
	edited := strings.Replace(shown, "memoryMiB: 256", "memoryMiB: 320", 1)
	if edited == shown {
		t.Fatalf("vm show -o yaml has no memoryMiB: 256:\n%s", shown)
	}
	ap := runIn(t, edited, virtBin, "--root", root, "apply", "-f", "-")
	if ap.code != 0 {
		t.Fatalf("virt apply of web's own manifest, edited: exit %d\nstderr: %s", ap.code, ap.stderr)
	}
	if e, _ := local("web"); e.Generation != web.Generation+1 || e.DirectorGeneration != "1" {
		t.Errorf("web after a local edit: generation %d, director generation %q; want %d and 1", e.Generation, e.DirectorGeneration, web.Generation+1)
	}
	directorVM("web", "at the host's new generation, director generation still 1", func(v dirVM, found bool) bool {
		return found && v.Generation == web.Generation+1 && v.DirectorGeneration != nil && *v.DirectorGeneration == "1"
	})

	// start-vm by the node's hostname, as an operator types it.
	started := succeeded(host, "start-vm", "web")
	web, _ = local("web")
	if web.Phase != vm.PhaseRunning || !alive(web.PID) {
		t.Fatalf("virt vm list after start-vm: web %s, pid %d (alive %v); want Running", web.Phase, web.PID, alive(web.PID))
	}
	waitLog(t, root, web.UID, "VIRTCON-GUEST-READY", 90*time.Second)
	directorVM("web", "Running", func(v dirVM, found bool) bool { return found && v.Phase == vm.PhaseRunning })

	// stop-vm --force --timeout: the power button first, and the guest,
	// which honours it, powers off cleanly (QEMU's SHUTDOWN says the
	// guest did, not a quit or kill), well within the grace (issue 21,
	// item 9: the agent took --force to skip the button and quit at once).
	events := followEvents(t, root, "web")
	stopStart := time.Now()
	stopped := succeeded(node, "stop-vm", "web", "--timeout", "60s", "--force")
	stopTook := time.Since(stopStart)
	if e, _ := local("web"); e.Phase != vm.PhaseStopped || alive(web.PID) {
		t.Fatalf("virt vm list after stop-vm: web %s, old pid %d alive %v; want Stopped", e.Phase, web.PID, alive(web.PID))
	}
	if stopped.Result == nil || stopped.Result.VM == nil || stopped.Result.VM.StopHow != "acpi" {
		t.Errorf("stop-vm --force result %+v; want stopHow acpi", stopped.Result)
	}
	if stopTook > 45*time.Second {
		t.Errorf("stop-vm --force of a guest that honours ACPI took %v; want it well within the 60s grace", stopTook)
	}
	var shutdown *vm.Event
	got := events()
	for i := range got {
		if got[i].Event == "SHUTDOWN" {
			shutdown = &got[i]
			break
		}
	}
	if shutdown == nil || shutdown.Data["guest"] != true || shutdown.Data["reason"] != "guest-shutdown" {
		t.Errorf("web's QMP events during stop-vm --force: %+v; want SHUTDOWN with guest true, reason guest-shutdown", got)
	}
	directorVM("web", "Stopped", func(v dirVM, found bool) bool { return found && v.Phase == vm.PhaseStopped })

	// delete-vm: gone from the host and from the director's inventory.
	succeeded(node, "delete-vm", "web")
	if e, ok := local("web"); ok {
		t.Fatalf("virt vm list after delete-vm: web still listed: %+v", e)
	}
	directorVM("web", "gone", func(v dirVM, found bool) bool { return !found })

	// The tasks as the director keeps them: listed by node and phase,
	// shown by a prefix of the id; a cancel of an ended task changes
	// nothing.
	var done []dirTask
	if err := json.Unmarshal([]byte(vdir(t, vd, data, "task", "list", "--node", host, "--phase", "succeeded", "-o", "json")), &done); err != nil {
		t.Fatalf("task list -o json: %v", err)
	}
	listedOK := map[string]bool{}
	for _, x := range done {
		listedOK[x.ID] = x.Phase == "Succeeded"
	}
	for _, id := range []string{created.ID, started.ID, stopped.ID} {
		if !listedOK[id] {
			t.Errorf("task list --phase succeeded: %+v; want task %s among them", done, id)
		}
	}
	var shownTask dirTask
	if err := json.Unmarshal([]byte(vdir(t, vd, data, "task", "show", started.ID[:8], "-o", "json")), &shownTask); err != nil ||
		shownTask.ID != started.ID || shownTask.Summary != "start-vm web" || shownTask.Phase != "Succeeded" {
		t.Errorf("task show %s: %+v (%v); want start-vm web, Succeeded", started.ID[:8], shownTask, err)
	}
	if out := vdir(t, vd, data, "task", "cancel", started.ID); !strings.Contains(out, started.ID+": Succeeded") {
		t.Errorf("task cancel of a task that ended: %q; want it still Succeeded", out)
	}

	// Without --wait: the id at once, the task ends on its own. With
	// --wait -O FILE, a diagnostics bundle is saved (0600).
	nowait := run(t, nil, vd, "--data", data, "task", "run", node, "collect-diagnostics")
	id := strings.TrimSpace(nowait.stdout)
	if nowait.code != 0 || len(id) != 36 {
		t.Fatalf("task run collect-diagnostics: exit %d, stdout %q; want the task's id\nstderr: %s", nowait.code, nowait.stdout, nowait.stderr)
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		var x dirTask
		if err := json.Unmarshal([]byte(vdir(t, vd, data, "task", "show", id, "-o", "json")), &x); err != nil {
			t.Fatal(err)
		}
		if x.Phase == "Succeeded" {
			break
		}
		if x.Phase == "Failed" || x.Phase == "Cancelled" || time.Now().After(deadline) {
			t.Fatalf("task %s (collect-diagnostics, no --wait): %s, failure %+v; want Succeeded within 60s", id, x.Phase, x.Failure)
		}
		time.Sleep(300 * time.Millisecond)
	}
	bundle := filepath.Join(logs, "bundle.tar.gz")
	succeeded(node, "collect-diagnostics", "-O", bundle)
	if st, err := os.Stat(bundle); err != nil || st.Size() == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("bundle %s: %v, %v; want a non-empty 0600 file", bundle, err, st)
	}

	// node resync and replica list, on the one replica there is.
	if out := vdir(t, vd, data, "node", "resync", host, "-o", "json"); !strings.Contains(out, node) && !strings.Contains(out, host) {
		t.Errorf("node resync %s: %q; want it to name the node", host, out)
	}
	var replicas []struct {
		ID       string `json:"id"`
		Leader   bool   `json:"leader"`
		Sessions uint32 `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(vdir(t, vd, data, "replica", "list", "-o", "json")), &replicas); err != nil ||
		len(replicas) != 1 || !replicas[0].Leader || replicas[0].Sessions < 1 {
		t.Errorf("replica list: %+v (%v); want one replica, the leader, holding a session", replicas, err)
	}

	// A deaf guest ignores ACPI: stop-vm waits out --timeout and fails,
	// QEMU left running; with --force QEMU then quits; with --timeout 0
	// there is no ACPI wait at all.
	succeeded(node, "create-vm", "-f", manifest("deaf", kernel, deaf))
	deafUp := func() vm.Entry {
		t.Helper()
		succeeded(node, "start-vm", "deaf")
		d, _ := local("deaf")
		if d.Phase != vm.PhaseRunning || !alive(d.PID) {
			t.Fatalf("deaf after start-vm: %s, pid %d; want Running", d.Phase, d.PID)
		}
		waitLog(t, root, d.UID, "VIRTCON-GUEST-READY", 90*time.Second)
		return d
	}
	d := deafUp()
	left, r := task(node, "stop-vm", "deaf", "--timeout", "3s")
	if r.code != 1 || left.Phase != "Failed" || r.elapsed < 3*time.Second || left.Failure == nil || !strings.Contains(left.Failure.Message, "QEMU was left running") {
		t.Errorf("stop-vm --timeout 3s of a deaf guest: exit %d, %s in %v, failure %+v; want 1, Failed after 3s saying QEMU runs on", r.code, left.Phase, r.elapsed, left.Failure)
	}
	if e, _ := local("deaf"); e.Phase != vm.PhaseRunning || e.PID != d.PID || !alive(d.PID) {
		t.Fatalf("deaf after stop-vm without --force: %s pid %d (old %d, alive %v); want it Running on", e.Phase, e.PID, d.PID, alive(d.PID))
	}
	forced, r := task(node, "stop-vm", "deaf", "--timeout", "3s", "--force")
	if r.code != 0 || forced.Phase != "Succeeded" || r.elapsed < 3*time.Second || forced.Result == nil || forced.Result.VM == nil || forced.Result.VM.StopHow != vm.StoppedQuit {
		t.Errorf("stop-vm --timeout 3s --force of a deaf guest: exit %d, %s in %v, result %+v; want 0, Succeeded after 3s, stopHow quit\nstderr: %s", r.code, forced.Phase, r.elapsed, forced.Result, r.stderr)
	}
	if e, _ := local("deaf"); e.Phase != vm.PhaseStopped || alive(d.PID) {
		t.Fatalf("deaf after stop-vm --force: %s, old pid %d alive %v; want Stopped", e.Phase, d.PID, alive(d.PID))
	}
	d = deafUp()
	tk, r := task(node, "stop-vm", "deaf", "--timeout", "0")
	if r.code != 0 || tk.Phase != "Succeeded" || r.elapsed > 20*time.Second {
		t.Fatalf("stop-vm --timeout 0 of a deaf guest: exit %d, %s in %v; want 0, Succeeded, no ACPI wait\nstderr: %s", r.code, tk.Phase, r.elapsed, r.stderr)
	}
	if tk.Result == nil || tk.Result.VM == nil || tk.Result.VM.StopHow == vm.StoppedACPI || tk.Result.VM.StopHow == "" {
		t.Errorf("stop-vm --timeout 0 of a deaf guest: result %+v; want a stopHow other than acpi", tk.Result)
	}
	if e, _ := local("deaf"); e.Phase != vm.PhaseStopped || alive(d.PID) {
		t.Fatalf("deaf after stop-vm --timeout 0: %s, old pid %d alive %v; want Stopped", e.Phase, d.PID, alive(d.PID))
	}
	succeeded(node, "delete-vm", "deaf")

	// A node whose agent advertises no kinds (a simulated agent of the
	// issue-13 protocol, connected): the director refuses the task.
	var tok struct {
		JoinString string `json:"joinString"`
	}
	if err := json.Unmarshal([]byte(vdir(t, vd, data, "token", "create", "-o", "json")), &tok); err != nil {
		t.Fatal(err)
	}
	join, err := enroll.ParseJoin(tok.JoinString)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids, err := loadgen.Enrol(ctx, []enroll.Join{join}, 1)
	if err != nil {
		t.Fatalf("simulated agent's enrolment: %v", err)
	}
	sessions := make(chan struct{})
	go func() {
		defer close(sessions)
		loadgen.Sessions(ctx, addr, "127.0.0.1", ids, time.Second, &loadgen.Stats{})
	}()
	defer func() { cancel(); <-sessions }()
	old := ids[0].NodeID
	waitNode(t, vd, data, old, 20*time.Second, "Ready and connected", func(n dirNode) bool { return n.State == "Ready" && n.Connected })
	_, r = task(old, "start-vm", "web")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "predates tasks") {
		t.Errorf("task run on a node that runs no tasks: exit %d, stdout %q, stderr %q; want 1, nothing, the refusal", r.code, r.stdout, r.stderr)
	}
	var listed []dirTask
	if err := json.Unmarshal([]byte(vdir(t, vd, data, "task", "list", "--node", old, "-o", "json")), &listed); err != nil || len(listed) != 0 {
		t.Errorf("task list of the refusing node: %v, %+v; want no task stored", err, listed)
	}
}
