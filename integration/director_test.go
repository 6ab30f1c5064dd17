//go:build integration

package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

// Enrolment into a director with every part real and in its own process:
// virt-director serve (embedded etcd, TLS 1.3 on loopback), virt agent
// enroll and run, a QEMU test guest. The agent and the director are
// killed -9 and restarted, the node revoked; the guest keeps its PID and
// start time throughout. Then everything the run left (logs, audit, agent
// status, the director's etcd files) is scanned for secrets.

// Liveness flags short enough for a test: Degraded after 3 s of silence,
// Offline after 6 s.
var directorLiveness = []string{"--heartbeat-interval", "1s", "--degraded-after", "3s", "--offline-after", "6s"}

var (
	directorOnce sync.Once
	directorBin  string
	directorErr  error
)

// requireDirector builds virt-director once, next to virt, for the tests
// that need it (the others do not pay for its etcd).
func requireDirector(t *testing.T) string {
	t.Helper()
	directorOnce.Do(func() {
		p := filepath.Join(filepath.Dir(virtBin), "virt-director")
		build := exec.Command(goTool(), "build", "-o", p, "github.com/virtcon/virtcon/cmd/virt-director")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			directorErr = fmt.Errorf("building virt-director: %w\n%s", err, out)
			return
		}
		directorBin = p
	})
	if directorErr != nil {
		t.Fatal(directorErr)
	}
	return directorBin
}

// child is a long-running process of the test (a director, an agent) with
// its stdout and stderr in a file; it is killed when the test ends.
type child struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startChild(t *testing.T, name, log, bin string, args ...string) *child {
	t.Helper()
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the child has its own copy
	c := &child{name: name, log: log, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	c.cmd.Stdout, c.cmd.Stderr = f, f
	c.cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			out := c.output()
			t.Logf("%s (%s), last of its log:\n%s", c.name, filepath.Base(log), out[max(0, len(out)-4000):])
		}
	})
	return c
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// kill ends the process with SIGKILL and waits for it.
func (c *child) kill() {
	if !c.exited() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-c.done
}

// code waits up to timeout for the process to exit and returns its exit
// code.
func (c *child) code(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s (pid %d) still running after %v; its log:\n%s", c.name, c.cmd.Process.Pid, timeout, c.output())
		return 0
	}
}

func (c *child) output() string {
	b, _ := os.ReadFile(c.log)
	return string(b)
}

// waitOutput waits for want in the process's log; the process exiting
// first fails the test.
func (c *child) waitOutput(t *testing.T, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := c.output()
		if i := strings.Index(out, want); i >= 0 {
			line, _, _ := strings.Cut(out[i:], "\n")
			return line
		}
		if c.exited() {
			t.Fatalf("%s exited (%v) before printing %q; its log:\n%s", c.name, c.cmd.ProcessState, want, out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s printed no %q within %v; its log:\n%s", c.name, want, timeout, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startDirector(t *testing.T, bin, data, addr, log string, extra ...string) *child {
	t.Helper()
	args := append(append([]string{"serve", "--data", data, "--listen", addr, "--advertise", addr}, directorLiveness...), extra...)
	return startChild(t, "virt-director", log, bin, args...)
}

// vdir runs an admin command of virt-director on data's socket and fails
// the test on a non-zero exit.
func vdir(t *testing.T, bin, data string, args ...string) string {
	t.Helper()
	r := run(t, nil, bin, append([]string{"--data", data}, args...)...)
	if r.code != 0 {
		t.Fatalf("virt-director %s: exit %d\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dirNode is the part of `virt-director node list|show -o json` the test
// reads.
type dirNode struct {
	ID        string  `json:"id"`
	Hostname  string  `json:"hostname"`
	State     string  `json:"state"`
	LastSeen  *string `json:"lastSeen"`
	Connected bool    `json:"connected"`
	// RevokeReason is node revoke's --reason.
	RevokeReason string `json:"revokeReason"`
	VMs          []struct {
		UID          string `json:"uid"`
		Name         string `json:"name"`
		Phase        string `json:"phase"`
		DisplayPhase string `json:"displayPhase"`
	} `json:"vms"`
}

type dirAudit struct {
	Kind    string `json:"kind"`
	TokenID string `json:"tokenId"`
	NodeID  string `json:"nodeId"`
	Serial  string `json:"serial"`
	Detail  string `json:"detail"`
}

func nodeOf(t *testing.T, bin, data, id string) dirNode {
	t.Helper()
	var nodes []dirNode
	if err := json.Unmarshal([]byte(vdir(t, bin, data, "node", "list", "-o", "json")), &nodes); err != nil {
		t.Fatalf("node list -o json: %v", err)
	}
	for _, n := range nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("node %s not in node list: %+v", id, nodes)
	return dirNode{}
}

func showNode(t *testing.T, bin, data, id string) (dirNode, string) {
	t.Helper()
	out := vdir(t, bin, data, "node", "show", id, "-o", "json")
	var n dirNode
	if err := json.Unmarshal([]byte(out), &n); err != nil {
		t.Fatalf("node show -o json: %v\n%s", err, out)
	}
	return n, out
}

// waitNode polls node list until ok, and returns the states seen on the
// way (each change once).
func waitNode(t *testing.T, bin, data, id string, timeout time.Duration, what string, ok func(dirNode) bool) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var seen []string
	for {
		n := nodeOf(t, bin, data, id)
		if len(seen) == 0 || seen[len(seen)-1] != n.State {
			seen = append(seen, n.State)
		}
		if ok(n) {
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not %s within %v: states seen %v, last %+v", id, what, timeout, seen, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func auditOf(t *testing.T, bin, data string) ([]dirAudit, string) {
	t.Helper()
	out := vdir(t, bin, data, "audit", "-o", "json")
	var es []dirAudit
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out)
	}
	return es, out
}

func countAudit(es []dirAudit, kind, node string) int {
	n := 0
	for _, e := range es {
		if e.Kind == kind && (node == "" || e.NodeID == node) {
			n++
		}
	}
	return n
}

func agentStatus(t *testing.T, root string) (agent.Status, result) {
	t.Helper()
	r := virt(t, nil, "--root", root, "agent", "status", "-o", "json")
	var st agent.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("virt agent status -o json: exit %d, %v\nstdout: %s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	return st, r
}

// procStartTime is field 22 of /proc/PID/stat: the start time in clock
// ticks since boot. A PID reused by another process has another.
func procStartTime(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatalf("pid %d: %v", pid, err)
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		t.Fatalf("pid %d: short stat %q", pid, b)
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatalf("pid %d: stat starttime %q: %v", pid, f[19], err)
	}
	return v
}

// procSampler records, until stopped, every distinct /proc/*/cmdline and
// the /proc/*/environ of the processes running one of bins: what anyone
// on the host could read while an enrolment runs.
type procSampler struct {
	bins   []string
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	seen   map[string]string // what was read -> where
	passes int
}

func startProcSampler(bins ...string) *procSampler {
	s := &procSampler{bins: bins, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]string{}}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			s.pass()
			time.Sleep(time.Millisecond)
		}
	}()
	return s
}

func (s *procSampler) pass() {
	ents, _ := os.ReadDir("/proc")
	found := map[string]string{}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil && len(b) > 0 {
			found["cmdline\x00"+string(b)] = "pid " + e.Name() + " cmdline"
		}
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		for _, bin := range s.bins {
			if strings.TrimSuffix(exe, " (deleted)") == bin {
				if b, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
					found["environ\x00"+exe+"\x00"+string(b)] = "pid " + e.Name() + " environ (" + filepath.Base(bin) + ")"
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range found {
		s.seen[k] = v
	}
	s.passes++
}

// finish stops the sampler and returns what it read.
func (s *procSampler) finish() (map[string]string, int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen, s.passes
}

// needle is a secret in one of its encodings.
type needle struct {
	name string
	b    []byte
}

// encodings of secret: raw, hex, and base64 at each of the three
// alignments it could have inside a longer encoded value (the last
// characters, which depend on what follows, left off).
func encodings(name string, secret []byte) []needle {
	ns := []needle{{name, secret}, {name + " (hex)", []byte(hex.EncodeToString(secret))}}
	for off := 0; off < 3 && off < len(secret)-12; off++ {
		enc := base64.StdEncoding.EncodeToString(secret[off:])
		if len(enc) > 8 {
			enc = enc[:len(enc)-4]
		}
		ns = append(ns, needle{fmt.Sprintf("%s (base64 from byte %d)", name, off), []byte(enc)},
			needle{fmt.Sprintf("%s (base64url from byte %d)", name, off), []byte(strings.NewReplacer("+", "-", "/", "_").Replace(enc))})
	}
	return ns
}

func findNeedles(b []byte, ns []needle) []string {
	var out []string
	for _, n := range ns {
		if bytes.Contains(b, n.b) {
			out = append(out, n.name)
		}
	}
	return out
}

var (
	// a P-256 ECPrivateKey (RFC 5915): version 1, the 32-byte scalar,
	// then the curve's OID [0] or the public key [1] (PKCS #8 omits the
	// OID inside)
	sec1Head    = []byte{0x02, 0x01, 0x01, 0x04, 0x20}
	sec1CurveP  = []byte{0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}
	sec1PubKey  = []byte{0xa1, 0x44, 0x03, 0x42, 0x00, 0x04}
	base64Run   = regexp.MustCompile(`[A-Za-z0-9+/]{64,}={0,2}`)
	pemKeyBlock = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`)
)

// hasP256KeyDER tells whether b holds an unencrypted P-256 private key in
// DER, as is or base64-encoded (as a JSON record holds bytes).
func hasP256KeyDER(b []byte) bool {
	if rawP256KeyDER(b) {
		return true
	}
	for _, m := range base64Run.FindAll(b, -1) {
		for off := 0; off < 4; off++ { // the run may start inside another
			s := m[off:]
			s = s[:len(s)/4*4]
			if d, err := base64.StdEncoding.DecodeString(string(s)); err == nil && rawP256KeyDER(d) {
				return true
			}
		}
	}
	return false
}

func rawP256KeyDER(b []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], sec1Head)
		if j < 0 {
			return false
		}
		k := i + j + len(sec1Head) + 32
		if rest := b[min(k, len(b)):]; bytes.HasPrefix(rest, sec1CurveP) || bytes.HasPrefix(rest, sec1PubKey) {
			return true
		}
		i += j + 1
	}
}

// agentKey reads the agent's private key from identity.pem: the PEM
// block's body lines, its DER and its scalar.
func agentKey(t *testing.T, l paths.Layout) (lines []string, der, scalar []byte) {
	t.Helper()
	b, err := os.ReadFile(agent.IdentityFile(l))
	if err != nil {
		t.Fatal(err)
	}
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if !strings.Contains(blk.Type, "PRIVATE KEY") {
			continue
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			t.Fatalf("identity.pem: %s: %v", blk.Type, err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			t.Fatalf("identity.pem: key is %T, want ECDSA", k)
		}
		if scalar, err = ek.Bytes(); err != nil {
			t.Fatal(err)
		}
		der = blk.Bytes
		for _, ln := range strings.Split(string(pem.EncodeToMemory(blk)), "\n") {
			if len(ln) >= 32 && !strings.HasPrefix(ln, "-----") {
				lines = append(lines, ln)
			}
		}
	}
	if der == nil {
		t.Fatal("identity.pem holds no private key")
	}
	return lines, der, scalar
}

// checkAgentFiles: the credentials directory is 0700 and every file in it
// 0600 (owned by root, the agent's user here).
func checkAgentFiles(t *testing.T, l paths.Layout) {
	t.Helper()
	dir := l.AgentDir()
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %04o, want 0700", dir, st.Mode().Perm())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		names[e.Name()] = true
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %s, want a regular file 0600", filepath.Join(dir, e.Name()), fi.Mode())
		}
	}
	for _, want := range []string{"identity.pem", "ca.pem", "agent.yaml"} {
		if !names[want] {
			t.Errorf("%s: no %s after enrolment (have %v)", dir, want, names)
		}
	}
}

func TestIntegrationDirectorEnrolRevoke(t *testing.T) {
	g := requireGuest(t)
	vd := requireDirector(t)
	testStart := time.Now()
	root := vmRoot(t)
	layout := paths.New(root)
	// short: the admin and etcd sockets under it must stay within 107 bytes
	data, err := os.MkdirTemp("", "vd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) }) // after the processes' cleanups: those run first
	logs := t.TempDir()
	addr := freeLoopback(t)
	var agentRuns []*child
	startAgent := func() *child {
		c := startChild(t, "virt agent run", filepath.Join(logs, fmt.Sprintf("agent-%d.log", len(agentRuns)+1)), virtBin, "--root", root, "agent", "run")
		agentRuns = append(agentRuns, c)
		return c
	}

	// The director and the guest start together: TCG boots slowly.
	dir1 := startDirector(t, vd, data, addr, filepath.Join(logs, "director-1.log"))
	uid := createGuest(t, root, "d1", g.initrd, true)
	guestPID := entry(t, root, "d1").PID
	if !alive(guestPID) {
		t.Fatalf("guest d1: pid %d not alive after vm create --start", guestPID)
	}
	guestStart := procStartTime(t, guestPID)
	guestSame := func(when string) {
		t.Helper()
		if !alive(guestPID) || procStartTime(t, guestPID) != guestStart {
			t.Fatalf("%s: the guest's QEMU (pid %d) is gone or is another process", when, guestPID)
		}
		if e := entry(t, root, "d1"); e.PID != guestPID || e.Phase != vm.PhaseRunning {
			t.Fatalf("%s: vm list says d1 is %s with pid %d; want Running with pid %d", when, e.Phase, e.PID, guestPID)
		}
	}
	ready := dir1.waitOutput(t, "virt-director: serving on", 60*time.Second)
	t.Logf("director up %v after the start: %s", time.Since(testStart).Round(time.Millisecond), ready)

	// Enrolment, with every process's command line (and the environment of
	// virt and virt-director processes) sampled from before the token is
	// made until the agent's session is up.
	sampler := startProcSampler(virtBin, vd)
	var created struct {
		ID         string `json:"id"`
		JoinString string `json:"joinString"`
	}
	if err := json.Unmarshal([]byte(vdir(t, vd, data, "token", "create", "-o", "json")), &created); err != nil {
		t.Fatalf("token create -o json: %v", err)
	}
	join, err := enroll.ParseJoin(created.JoinString)
	if err != nil {
		t.Fatalf("token create's join string: %v", err)
	}
	secret := join.Secret()
	if !strings.Contains(ready, join.Pin()) || join.Addr() != addr || join.ID() != created.ID {
		t.Fatalf("join string %s: want address %s, id %s and the pin of the ready line %q", join, addr, created.ID, ready)
	}
	joinFile := filepath.Join(root, "join.txt")
	if err := os.WriteFile(joinFile, []byte(created.JoinString+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := virt(t, nil, "--root", root, "agent", "enroll", "--join-file", joinFile, "-o", "json")
	if r.code != 0 {
		t.Fatalf("virt agent enroll: exit %d\nstderr: %s", r.code, r.stderr)
	}
	enrolOut := r.stdout + r.stderr
	var enrolled agent.Status
	if err := json.Unmarshal([]byte(r.stdout), &enrolled); err != nil || !enrolled.Enrolled || enrolled.NodeID == "" {
		t.Fatalf("virt agent enroll -o json: %v: %s", err, r.stdout)
	}
	node := enrolled.NodeID
	if fileExists(joinFile) {
		t.Error("the join file is still there after a successful enrolment")
	}
	checkAgentFiles(t, layout)
	agentLines, agentDER, agentScalar := agentKey(t, layout)

	agent1 := startAgent()
	waitNode(t, vd, data, node, 30*time.Second, "Ready and connected", func(n dirNode) bool { return n.State == "Ready" && n.Connected })
	seen, passes := sampler.finish()
	sawEnrol := false
	for k, where := range seen {
		if strings.Contains(k, "agent\x00enroll\x00--join-file") {
			sawEnrol = true
		}
		for _, field := range strings.Split(k, "\x00") {
			if strings.Contains(field, secret) {
				t.Errorf("the token's secret is readable in %s: %q", where, strings.ReplaceAll(field, secret, "<SECRET>"))
			}
		}
	}
	t.Logf("/proc sampled %d times during the enrolment: %d distinct command lines and environments", passes, len(seen))
	if !sawEnrol {
		t.Error("the /proc sampler never saw virt agent enroll running: the leak check of the process list proved nothing")
	}
	if st, _ := agentStatus(t, root); !st.Running || st.State != agent.StateConnected || st.NodeID != node || st.PID != agent1.cmd.Process.Pid {
		t.Errorf("virt agent status: %+v; want running (pid %d), connected, node %s", st, agent1.cmd.Process.Pid, node)
	}
	// The report comes right after Registered: wait for it to show the guest.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, out := showNode(t, vd, data, node)
		if len(n.VMs) > 0 && vmPhase(n, uid) == vm.PhaseRunning {
			if dp := vmDisplay(n, uid); dp != vm.PhaseRunning {
				t.Errorf("node show of a Ready node: d1's displayPhase %q, want Running", dp)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node show: no report with d1 Running within 20s:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	guestSame("after enrolment")

	// The agent killed -9: the guest runs on, the node goes Degraded, then
	// Offline, its VMs "unknown", never stopped.
	agent1.kill()
	killedAt := time.Now()
	guestSame("after the agent's kill -9")
	if st, _ := agentStatus(t, root); st.Running || !st.Enrolled || st.Alert != "" {
		t.Errorf("virt agent status after the agent's kill -9: %+v; want enrolled, not running, no alert", st)
	}
	unknown := func(state string) {
		t.Helper()
		n, out := showNode(t, vd, data, node)
		if dp := vmDisplay(n, uid); n.State != state || !strings.HasPrefix(dp, "unknown (last seen Running at ") || vmPhase(n, uid) != vm.PhaseRunning {
			t.Errorf("node show of a silent node: state %s, d1 displayPhase %q, phase %q; want %s, unknown (last seen Running at …), phase Running\n%s",
				n.State, dp, vmPhase(n, uid), state, out)
		}
	}
	states := waitNode(t, vd, data, node, 10*time.Second, "Degraded", func(n dirNode) bool { return n.State != "Ready" })
	if states[len(states)-1] != "Degraded" {
		t.Fatalf("node states after the agent's kill -9: %v; want Degraded first", states)
	}
	unknown("Degraded")
	more := waitNode(t, vd, data, node, 10*time.Second, "Offline", func(n dirNode) bool { return n.State == "Offline" })
	if more[0] == "Degraded" {
		more = more[1:]
	}
	states = append(states, more...)
	t.Logf("agent killed: node states %v, Offline %v after the kill", states, time.Since(killedAt).Round(time.Millisecond))
	unknown("Offline")
	guestSame("with the node Offline")

	// The agent again: Ready, the VM shown Running again.
	startAgent()
	waitNode(t, vd, data, node, 30*time.Second, "Ready again", func(n dirNode) bool { return n.State == "Ready" && n.Connected })
	if n, _ := showNode(t, vd, data, node); vmDisplay(n, uid) != vm.PhaseRunning {
		t.Errorf("node show after the agent came back: d1 displayPhase %q, want Running", vmDisplay(n, uid))
	}

	// The director killed -9 and restarted on the same data: the agent
	// reconnects by itself, node, token and audit survive in etcd.
	auditBefore, _ := auditOf(t, vd, data)
	dir1.kill()
	guestSame("after the director's kill -9")
	time.Sleep(1500 * time.Millisecond) // long enough for the agent to notice and back off
	if agentRuns[1].exited() {
		t.Fatalf("the agent exited when the director died:\n%s", agentRuns[1].output())
	}
	if st, _ := agentStatus(t, root); st.State == agent.StateConnected || !st.Running {
		t.Errorf("virt agent status with the director dead: %+v; want running, not connected", st)
	}
	dir2 := startDirector(t, vd, data, addr, filepath.Join(logs, "director-2.log"), "--log-format", "json") // both log formats get scanned
	restartedAt := time.Now()
	if again := dir2.waitOutput(t, "virt-director: serving on", 60*time.Second); !strings.Contains(again, join.Pin()) {
		t.Errorf("the restarted director's ready line %q: want the same CA pin %s", again, join.Pin())
	}
	// the agent was backing off for about 2 s: its next try comes within
	// a few seconds (1 s x 1.6^n, +-20 %)
	waitNode(t, vd, data, node, 10*time.Second, "Ready after the director's restart", func(n dirNode) bool { return n.State == "Ready" && n.Connected })
	t.Logf("director restarted: node Ready again %v after its start", time.Since(restartedAt).Round(time.Millisecond))
	if st, _ := agentStatus(t, root); st.State != agent.StateConnected || st.PID != agentRuns[1].cmd.Process.Pid {
		t.Errorf("virt agent status after the director's restart: %+v; want the same agent (pid %d) connected", st, agentRuns[1].cmd.Process.Pid)
	}
	var tokens []struct {
		ID          string   `json:"id"`
		State       string   `json:"state"`
		UsedByNodes []string `json:"usedByNodes"`
	}
	tokenOut := vdir(t, vd, data, "token", "list", "-o", "json")
	if err := json.Unmarshal([]byte(tokenOut), &tokens); err != nil {
		t.Fatalf("token list -o json: %v", err)
	}
	if len(tokens) != 1 || tokens[0].ID != created.ID || tokens[0].State != "used" || indexOf(tokens[0].UsedByNodes, node) < 0 {
		t.Errorf("token list after the restart: %+v; want token %s used by node %s", tokens, created.ID, node)
	}
	auditAfter, _ := auditOf(t, vd, data)
	for _, kind := range []string{"token.create", "token.use", "cert.issue", "session.open", "session.close"} {
		if b, a := countAudit(auditBefore, kind, ""), countAudit(auditAfter, kind, ""); b == 0 || a < b {
			t.Errorf("audit %s: %d entries before the director's kill, %d after its restart; want some, all kept", kind, b, a)
		}
	}
	if countAudit(auditAfter, "session.open", node) <= countAudit(auditBefore, "session.open", node) {
		t.Error("audit: no session.open of the reconnected agent after the restart")
	}
	guestSame("after the director's restart")

	// Revocation: the agent exits 5 within seconds and never dials again,
	// its status says revoked, and the guest runs on.
	es, _ := auditOf(t, vd, data)
	opens := countAudit(es, "session.open", node)
	logOpens := strings.Count(dir2.output(), `"msg":"session open"`)
	vdir(t, vd, data, "node", "revoke", node, "--reason", "integration test")
	revokedAt := time.Now()
	if code := agentRuns[1].code(t, 10*time.Second); code != 5 {
		t.Errorf("virt agent run after the revocation: exit %d, want 5\n%s", code, agentRuns[1].output())
	}
	t.Logf("revoked: the agent exited %v after node revoke", time.Since(revokedAt).Round(time.Millisecond))
	// every call with the revoked certificate from now on would be logged
	refused := strings.Count(dir2.output(), `"msg":"request refused"`)
	st, sr := agentStatus(t, root)
	if sr.code != 5 || st.Alert != agent.AlertRevoked || st.Running || !strings.Contains(st.AlertReason, "integration test") {
		t.Errorf("virt agent status after the revocation: exit %d, %+v; want exit 5, alert revoked with the admin's reason, not running", sr.code, st)
	}
	again := startAgent()
	if code := again.code(t, 10*time.Second); code != 5 {
		t.Errorf("virt agent run of a revoked node: exit %d, want 5\n%s", code, again.output())
	}
	if !strings.Contains(again.output(), "not connecting") {
		t.Errorf("virt agent run of a revoked node says nothing of not connecting:\n%s", again.output())
	}
	guestSame("after the revocation")
	time.Sleep(3 * time.Second) // an agent backing off from 1 s would have called again by now
	es, auditOut := auditOf(t, vd, data)
	if now := countAudit(es, "session.open", node); now != opens {
		t.Errorf("audit: %d session.open of node %s after its revocation, %d before; want no new session", now, node, opens)
	}
	if now := strings.Count(dir2.output(), `"msg":"session open"`); now != logOpens || logOpens == 0 {
		t.Errorf("the director logged %d sessions opening before the revocation, %d after; want some, and none after", logOpens, now)
	}
	if now := strings.Count(dir2.output(), `"msg":"request refused"`); now != refused {
		t.Errorf("the director refused %d requests after the agent exited: something still calls with the revoked certificate", now-refused)
	}
	if countAudit(es, "cert.revoke", node) == 0 {
		t.Error("audit: no cert.revoke of the revoked node")
	}
	if n := nodeOf(t, vd, data, node); n.State != "Revoked" || n.Connected || n.RevokeReason != "integration test" {
		t.Errorf("node list after the revocation: %+v; want Revoked (integration test), not connected", n)
	}
	guestSame("with the node revoked")

	// Leakage: the secret, the agent's key and the KEK in nothing the run
	// left.
	kek, err := os.ReadFile(filepath.Join(data, "ca.kek"))
	if err != nil {
		t.Fatal(err)
	}
	secretNeedles := encodings("the token's secret", []byte(secret))
	keyNeedles := append(encodings("the agent's key (DER)", agentDER), encodings("the agent's private scalar", agentScalar)...)
	for i, ln := range agentLines {
		keyNeedles = append(keyNeedles, needle{fmt.Sprintf("the agent's key PEM line %d", i+1), []byte(ln)})
	}
	kekNeedles := encodings("the CA's key encryption key", kek)
	all := append(append(append([]needle{}, secretNeedles...), keyNeedles...), kekNeedles...)
	// the scanner finds what it looks for
	for _, probe := range [][]byte{agentDER, []byte(`{"k":"` + base64.StdEncoding.EncodeToString(append([]byte("xy"), agentDER...)) + `"}`)} {
		if !hasP256KeyDER(probe) || len(findNeedles(probe, keyNeedles)) == 0 {
			t.Fatal("the key scanner misses the agent's own key: it would prove nothing")
		}
	}
	agentStatusOut := sr.stdout + sr.stderr
	texts := map[string]string{"audit -o json": auditOut, "virt agent status -o json": agentStatusOut, "virt agent enroll": enrolOut, "token list -o json": tokenOut}
	for _, c := range append([]*child{dir1, dir2}, agentRuns...) {
		texts[filepath.Base(c.log)] = c.output()
	}
	for what, text := range texts {
		if found := findNeedles([]byte(text), all); len(found) > 0 {
			t.Errorf("%s holds %s", what, strings.Join(found, ", "))
		}
	}
	scanned := 0
	err = filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		scanned++
		rel, _ := filepath.Rel(data, p)
		ns := append(append([]needle{}, secretNeedles...), keyNeedles...)
		if rel != "ca.kek" {
			ns = append(ns, kekNeedles...)
			if pemKeyBlock.Match(b) {
				t.Errorf("%s holds a PEM private key block", rel)
			}
			if hasP256KeyDER(b) {
				t.Errorf("%s holds an unencrypted P-256 private key (DER)", rel)
			}
		}
		if found := findNeedles(b, ns); len(found) > 0 {
			t.Errorf("%s holds %s", rel, strings.Join(found, ", "))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s: %v", data, err)
	}
	if !fileExists(filepath.Join(data, "etcd", "member", "snap", "db")) || !hasWAL(t, data) {
		t.Errorf("the scan of %s found no etcd db or WAL to read (%d files)", data, scanned)
	}
	t.Logf("leak scan: %d files under the director's data, %d logs and outputs", scanned, len(texts))

	// Done: the guest, still the same process, stops cleanly.
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 60*time.Second)
	guestSame("at the end")
	v(t, root, "vm", "stop", "d1", "--timeout", "30")
	if alive(guestPID) {
		t.Error("vm stop left the guest's QEMU running")
	}
	t.Logf("whole test: %v", time.Since(testStart).Round(time.Millisecond))
}

func hasWAL(t *testing.T, data string) bool {
	t.Helper()
	ws, err := filepath.Glob(filepath.Join(data, "etcd", "member", "wal", "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ws) > 0
}

func vmPhase(n dirNode, uid string) string {
	for _, v := range n.VMs {
		if v.UID == uid {
			return v.Phase
		}
	}
	return ""
}

func vmDisplay(n dirNode, uid string) string {
	for _, v := range n.VMs {
		if v.UID == uid {
			return v.DisplayPhase
		}
	}
	return ""
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}
