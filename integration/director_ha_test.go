//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/etcdstore/etcdtest"
	"github.com/virtcon/virtcon/director/loadgen"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/vm"
)

// haAgent is a simulated agent that moves between director replicas as
// the real one does: after a session ends it waits about a second (the
// agent's minimum backoff) and dials the next address. It runs each task
// id once (a journal) and answers Queued then Succeeded.
type haAgent struct {
	id    loadgen.Identity
	addrs []string

	mu       sync.Mutex
	replica  string    // of the live session, "" between sessions
	regAt    time.Time // the last Registered
	regs     int
	ended    int
	acks     int
	runs     map[string]int // task id → times run
	received map[string]int // task id → times delivered
}

var haKinds = []string{"start-vm", "stop-vm", "collect-diagnostics"}

func (a *haAgent) run(ctx context.Context, start int) {
	for i := start; ctx.Err() == nil; i++ {
		err := a.session(ctx, a.addrs[i%len(a.addrs)])
		a.mu.Lock()
		a.replica = ""
		if err != nil {
			a.ended++
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(float64(time.Second) * (0.8 + 0.4*rand.Float64()))):
		}
	}
}

func (a *haAgent) session(ctx context.Context, addr string) error {
	var p http.Protocols
	p.SetHTTP2(true)
	tr := &http.Transport{Protocols: &p, ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: a.id.Roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{a.id.Cert},
	}}
	defer tr.CloseIdleConnections()
	c := directorv1connect.NewAgentServiceClient(&http.Client{Transport: tr}, "https://"+addr)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := c.Session(ctx)
	defer s.CloseRequest() //nolint:errcheck // the stream is being dropped
	if err := s.Send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Register{Register: &directorv1.Register{
		NodeId: a.id.NodeID, Host: &directorv1.HostFacts{Hostname: a.id.Cert.Leaf.Subject.CommonName, AgentVersion: "ha-test"},
		TaskKinds: haKinds,
	}}}); err != nil {
		return err
	}
	first, err := s.Receive()
	if err != nil {
		return err
	}
	if first.GetRegistered() == nil {
		return errors.New("first answer is not Registered")
	}
	a.mu.Lock()
	a.replica, a.regAt = first.GetRegistered().GetReplicaId(), time.Now()
	a.regs++
	a.mu.Unlock()
	var sendMu sync.Mutex
	send := func(m *directorv1.SessionRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return s.Send(m)
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := s.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			switch msg := m.GetMsg().(type) {
			case *directorv1.SessionResponse_HeartbeatAck:
				a.mu.Lock()
				a.acks++
				a.mu.Unlock()
			case *directorv1.SessionResponse_Task:
				tid := msg.Task.GetId()
				a.mu.Lock()
				a.received[tid]++
				ran := a.runs[tid] > 0
				if !ran {
					a.runs[tid]++
				}
				a.mu.Unlock()
				// a journalled id gets its last status again, never a rerun
				_ = send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskStatus{TaskStatus: &directorv1.TaskStatus{
					TaskId: tid, Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_QUEUED}}})
				_ = send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_TaskStatus{TaskStatus: &directorv1.TaskStatus{
					TaskId: tid, Seq: 2, Phase: directorv1.TaskPhase_TASK_PHASE_SUCCEEDED}}})
			}
		}
	}()
	for seq := uint64(1); ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case err := <-recvErr:
			return err
		case <-time.After(time.Second):
		}
		if err := send(&directorv1.SessionRequest{Msg: &directorv1.SessionRequest_Heartbeat{Heartbeat: &directorv1.Heartbeat{Seq: seq}}}); err != nil {
			return err
		}
	}
}

func (a *haAgent) state() (replica string, regAt time.Time, regs, ended, acks int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.replica, a.regAt, a.regs, a.ended, a.acks
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestIntegrationDirectorHA: a 3-member etcd cluster (member processes)
// and two virt-director serve replicas sharing one ca.kek; 50 simulated
// agents that move between replicas as the real one does.
//   - kill -9 the replica holding about half: its agents are Registered on
//     the other within 15 s (p99 printed), and a task sent right after
//     the kill is delivered and run once;
//   - kill -9 the etcd leader: a write loop through the admin socket fails
//     for a few seconds at most;
//   - kill two members: virt-director task run fails within 5 s with the
//     etcd words, the sessions stay up (heartbeats answered, none ended);
//   - restore them: task run works again.
func TestIntegrationDirectorHA(t *testing.T) {
	const agents = 50
	vd := requireDirector(t)
	cl := etcdtest.StartCluster(t, 3, etcdtest.Opts{NoFsync: true})
	eps := strings.Join(cl.Endpoints(), ",")
	tmp := t.TempDir()
	dataA, dataB := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	addrA, addrB := freeLoopback(t), freeLoopback(t)
	repA := startDirector(t, vd, dataA, addrA, filepath.Join(tmp, "a.log"), "--etcd-endpoints", eps, "--replica-id", "ra")
	repA.waitOutput(t, "virt-director: serving on", 60*time.Second)
	// One CA: the second replica needs the first one's key file.
	kek, err := os.ReadFile(filepath.Join(dataA, director.KEKFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dataB, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataB, director.KEKFileName), kek, 0o600); err != nil {
		t.Fatal(err)
	}
	repB := startDirector(t, vd, dataB, addrB, filepath.Join(tmp, "b.log"), "--etcd-endpoints", eps, "--replica-id", "rb")
	repB.waitOutput(t, "virt-director: serving on", 60*time.Second)

	adminA := director.AdminClient(filepath.Join(dataA, director.AdminSocketName))
	adminB := director.AdminClient(filepath.Join(dataB, director.AdminSocketName))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	joins := make([]enroll.Join, agents)
	for i := range joins {
		tok, err := adminA.CreateToken(ctx, connect.NewRequest(&directorv1.CreateTokenRequest{}))
		if err != nil {
			t.Fatalf("CreateToken: %v", err)
		}
		if joins[i], err = enroll.ParseJoin(tok.Msg.GetJoinString()); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := loadgen.Enrol(ctx, joins, 8)
	if err != nil {
		t.Fatalf("enrol %d agents: %v", agents, err)
	}
	actx, acancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { acancel(); wg.Wait() }()
	as := make([]*haAgent, agents)
	for i := range as {
		as[i] = &haAgent{id: ids[i], addrs: []string{addrA, addrB}, runs: map[string]int{}, received: map[string]int{}}
		wg.Add(1)
		go func() { defer wg.Done(); as[i].run(actx, i) }()
	}
	waitAll := func(what string, within time.Duration, ok func(a *haAgent) bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			n := 0
			for _, a := range as {
				if ok(a) {
					n++
				}
			}
			if n == len(as) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d agents after %s", what, n, len(as), within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitAll("registered", 30*time.Second, func(a *haAgent) bool { r, _, _, _, _ := a.state(); return r != "" })
	onA := 0
	for _, a := range as {
		if r, _, _, _, _ := a.state(); r == "ra" {
			onA++
		}
	}
	reps, err := adminB.ListReplicas(ctx, connect.NewRequest(&directorv1.ListReplicasRequest{}))
	if err != nil || len(reps.Msg.GetReplicas()) != 2 {
		t.Fatalf("ListReplicas on B: %v %v, want both replicas", reps, err)
	}
	t.Logf("replicas: %v; %d agents on ra", reps.Msg.GetReplicas(), onA)

	// And one real agent (virt agent run), enrolled through A's join
	// string: it learns B's address from A.
	root := vmRoot(t)
	realNode := resyncEnrol(t, vd, dataA, root)
	startChild(t, "virt agent run", filepath.Join(tmp, "agent.log"), virtBin, "--root", root, "agent", "run")
	realVia := func() string {
		r := run(t, nil, vd, "--data", dataB, "node", "show", realNode, "-o", "json")
		var n struct {
			Connected bool   `json:"connected"`
			ReplicaID string `json:"replicaId"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &n) != nil || !n.Connected {
			return ""
		}
		return n.ReplicaID
	}
	deadline := time.Now().Add(30 * time.Second)
	for realVia() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the real agent was not connected within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	realOnA := realVia() == "ra"
	// As root with the test guest: a stopped VM on the real agent's host,
	// started by a task sent right after the kill.
	g, withGuest := haGuest(t)
	if withGuest {
		createGuest(t, root, "ha-web", g.initrd, false)
	} else {
		t.Log("not root or no test guest (make guest): the real agent runs no VM here")
	}

	// 1. kill -9 replica A.
	var victim *haAgent
	for _, a := range as {
		if r, _, _, _, _ := a.state(); r == "ra" {
			victim = a
			break
		}
	}
	if victim == nil {
		t.Fatal("no agent on ra")
	}
	killed := time.Now()
	repA.kill()
	taskID := strings.TrimSpace(vdir(t, vd, dataB, "task", "run", victim.id.NodeID, "start-vm", "web"))
	var guestTask string
	if withGuest {
		guestTask = strings.TrimSpace(vdir(t, vd, dataB, "task", "run", realNode, "start-vm", "ha-web"))
	}
	var moved []time.Duration
	waitAll("back on rb", 20*time.Second, func(a *haAgent) bool { r, _, _, _, _ := a.state(); return r == "rb" })
	for _, a := range as {
		if _, at, regs, _, _ := a.state(); at.After(killed) && regs > 1 {
			moved = append(moved, at.Sub(killed))
		}
	}
	p50, p99 := percentile(moved, 0.5), percentile(moved, 0.99)
	t.Logf("replica failover: %d agents moved to rb: p50 %s, p99 %s, max %s (target < 15 s)", len(moved), p50, p99, percentile(moved, 1))
	if len(moved) < onA || p99 >= 15*time.Second {
		t.Errorf("failover: %d agents moved (want %d), p99 %s (want < 15 s)", len(moved), onA, p99)
	}
	if realOnA {
		for realVia() != "rb" {
			if time.Since(killed) > 15*time.Second {
				t.Fatal("the real agent was not on rb 15 s after ra was killed")
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("the real agent (virt agent run) on rb %s after the kill", time.Since(killed).Round(10*time.Millisecond))
	} else {
		t.Logf("the real agent was on %s already: not moved by the kill", realVia())
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		out := vdir(t, vd, dataB, "task", "show", taskID, "-o", "json")
		if strings.Contains(out, `"SUCCEEDED"`) || strings.Contains(out, `"Succeeded"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s sent right after the kill: not succeeded within 15 s:\n%s", taskID, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	victim.mu.Lock()
	runs, got := victim.runs[taskID], victim.received[taskID]
	victim.mu.Unlock()
	if runs != 1 {
		t.Errorf("task %s ran %d times on its node (delivered %d times), want once", taskID, runs, got)
	}
	t.Logf("task sent after the kill: run once, delivered %d time(s)", got)

	var guestPID int
	if withGuest {
		deadline := time.Now().Add(60 * time.Second)
		for {
			out := vdir(t, vd, dataB, "task", "show", guestTask, "-o", "json")
			if strings.Contains(out, `"Succeeded"`) {
				break
			}
			if strings.Contains(out, `"Failed"`) || time.Now().After(deadline) {
				t.Fatalf("start-vm on the real agent, sent right after the kill:\n%s", out)
			}
			time.Sleep(200 * time.Millisecond)
		}
		pids := qemuPIDsUnder(root)
		if len(pids) != 1 || listVMs(t, root)["ha-web"].Phase != vm.PhaseRunning {
			t.Fatalf("after start-vm through rb: QEMU processes %v, VM %+v; want one, Running", pids, listVMs(t, root)["ha-web"])
		}
		guestPID = pids[0]
		t.Logf("start-vm sent right after the kill ran once on the real agent: QEMU pid %d", guestPID)
	}

	// 2. kill -9 the etcd leader: a write loop's failures last seconds.
	ldr := cl.Leader(ctx)
	if ldr < 0 {
		t.Fatal("no etcd leader")
	}
	stop := make(chan struct{})
	var firstFail, lastFail time.Time
	fails, writes := 0, 0
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			began := time.Now()
			_, err := adminB.CreateToken(wctx, connect.NewRequest(&directorv1.CreateTokenRequest{MaxUses: 1}))
			wcancel()
			writes++
			if err != nil {
				// the window: from the first failing write's start to
				// the last one's answer
				if firstFail.IsZero() {
					firstFail = began
				}
				lastFail = time.Now()
				fails++
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	cl.Kill(ldr)
	time.Sleep(8 * time.Second)
	close(stop)
	<-loopDone
	window := time.Duration(0)
	if fails > 0 {
		window = lastFail.Sub(firstFail)
	}
	t.Logf("etcd leader (member %d) killed: %d of %d writes failed over %s", ldr, fails, writes, window)
	if window > 5*time.Second {
		t.Errorf("writes failed for %s after the leader's kill, want at most 5 s", window)
	}
	cl.Restart(ldr)
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// 3. two members dead: bounded, clear failure; sessions stay up.
	dead := []int{(ldr + 1) % 3, (ldr + 2) % 3}
	regsBefore, endedBefore, acksBefore := sum(as)
	for _, i := range dead {
		cl.Kill(i)
	}
	began := time.Now()
	r := run(t, nil, vd, "--data", dataB, "task", "run", victim.id.NodeID, "start-vm", "web")
	took := time.Since(began)
	t.Logf("quorum lost: task run exit %d after %s: %s", r.code, took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	if r.code != 1 || took > 5*time.Second || !strings.Contains(r.stderr, "etcd") || !strings.Contains(r.stderr, "quorum") {
		t.Errorf("task run without quorum: exit %d after %s, stderr %q; want exit 1 within 5 s naming etcd and quorum", r.code, took, r.stderr)
	}
	time.Sleep(3 * time.Second)
	regsAfter, endedAfter, acksAfter := sum(as)
	t.Logf("during the quorum loss: %d heartbeats answered, %d sessions ended, %d registrations", acksAfter-acksBefore, endedAfter-endedBefore, regsAfter-regsBefore)
	if endedAfter != endedBefore || regsAfter != regsBefore || acksAfter-acksBefore < agents {
		t.Errorf("without quorum: %d sessions ended, %d registered, %d heartbeats answered; want 0, 0, >= %d", endedAfter-endedBefore, regsAfter-regsBefore, acksAfter-acksBefore, agents)
	}

	// 4. restore: tasks run again.
	for _, i := range dead {
		cl.Restart(i)
	}
	restored := time.Now()
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		r := run(t, nil, vd, "--data", dataB, "task", "run", victim.id.NodeID, "start-vm", "web", "--wait")
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task run --wait after the restore: exit %d: %s", r.code, r.stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("restored: task run --wait succeeded %s after the members were restarted", time.Since(restored).Round(time.Millisecond))

	// 5. ra back, rb stopped on purpose (SIGTERM): Goodbye with no delay
	// and its lease revoked, its agents on ra at once.
	repA = startDirector(t, vd, dataA, addrA, filepath.Join(tmp, "a2.log"), "--etcd-endpoints", eps, "--replica-id", "ra")
	repA.waitOutput(t, "virt-director: serving on", 60*time.Second)
	deadline = time.Now().Add(15 * time.Second)
	for {
		reps, err := adminA.ListReplicas(ctx, connect.NewRequest(&directorv1.ListReplicasRequest{}))
		if err == nil && len(reps.Msg.GetReplicas()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ra restarted: ListReplicas %v %v, want both", reps, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopped := time.Now()
	if err := repB.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitAll("on ra after rb stopped", 15*time.Second, func(a *haAgent) bool { r, _, _, _, _ := a.state(); return r == "ra" })
	var back []time.Duration
	for _, a := range as {
		if _, at, _, _, _ := a.state(); at.After(stopped) {
			back = append(back, at.Sub(stopped))
		}
	}
	t.Logf("rb stopped (SIGTERM): %d agents on ra after p50 %s, p99 %s", len(back), percentile(back, 0.5), percentile(back, 0.99))
	if code := repB.code(t, 15*time.Second); code != 0 {
		t.Errorf("rb after SIGTERM: exit %d, want 0", code)
	}
	if withGuest {
		if pids := qemuPIDsUnder(root); len(pids) != 1 || pids[0] != guestPID {
			t.Errorf("the guest's QEMU after the etcd failures: %v, want the same one (%d): no VM is touched", pids, guestPID)
		}
	}
}

// haGuest is the test guest when this run can start it (root, QEMU, make
// guest), without skipping the test when it cannot.
func haGuest(t *testing.T) (guest, bool) {
	if os.Geteuid() != 0 {
		return guest{}, false
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return guest{}, false
	}
	dir, _ := filepath.Abs(filepath.Join("..", "build", "guest"))
	if d := os.Getenv("GUEST_OUT"); d != "" {
		dir, _ = filepath.Abs(d)
	}
	for _, f := range []string{"vmlinuz", "initrd.img", "initrd-deaf.img"} {
		if !fileExists(filepath.Join(dir, f)) {
			return guest{}, false
		}
	}
	return requireGuest(t), true
}

// sum is the agents' registrations, ended sessions and answered
// heartbeats.
func sum(as []*haAgent) (regs, ended, acks int) {
	for _, a := range as {
		_, _, r, e, k := a.state()
		regs, ended, acks = regs+r, ended+e, acks+k
	}
	return regs, ended, acks
}
