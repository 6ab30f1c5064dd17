//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/internal/testutil"
)

// netTask is the part of `virt-director task run --wait -o json` the
// network test reads.
type netTask struct {
	ID      string `json:"id"`
	Phase   string `json:"phase"`
	Failure *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"failure"`
	Result *struct {
		Network *struct {
			TryID        string `json:"tryId"`
			ConfirmedVia string `json:"confirmedVia"`
		} `json:"network"`
	} `json:"result"`
	Log []string `json:"log"`
}

// addrsOf lists the IPv4 addresses (CIDR) of dev in namespace ns.
func addrsOf(t *testing.T, ns, dev string) []string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-4", "-o", "addr", "show", "dev", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s addr show %s: %v: %s", ns, dev, err, out)
	}
	var addrs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				addrs = append(addrs, f[i+1])
			}
		}
	}
	return addrs
}

// A network change sent by the director is a trial: the agent (and its
// try's watchdog) runs in a network namespace joined by a veth to the
// director outside it. A change that keeps the director reachable is
// confirmed by the session coming back over it; one that moves the
// host's address to another subnet cuts the director off, is rolled back
// by the watchdog at the deadline, and the agent reconnects over the old
// configuration and reports ROLLED_BACK.
func TestIntegrationDirectorApplyNetwork(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	vd := requireDirector(t)
	ns := netns(t)
	logs := t.TempDir()

	// the veth: the director's side in the root namespace, the host's in ns
	hostIf := fmt.Sprintf("vdh%d", time.Now().UnixNano()%1e6)
	if out, err := exec.Command("ip", "link", "add", hostIf, "type", "veth", "peer", "name", "vdn0", "netns", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip link add veth: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostIf).Run() })
	for _, args := range [][]string{{"addr", "add", "10.91.0.1/24", "dev", hostIf}, {"link", "set", hostIf, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	root := vmRoot(t)
	write := func(name, body string) string {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, []byte("apiVersion: virtcon/v1\nkind: HostNetwork\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// the host's configuration before any task: its address on the veth
	vns(t, ns, root, "net", "apply", "-f", write("base.yaml", "management:\n  interface: vdn0\n  addresses: [10.91.0.2/24]\n"))

	ln, err := net.Listen("tcp", "10.91.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	data, err := os.MkdirTemp("", "vd") // short: sockets under it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	d := startDirector(t, vd, data, addr, filepath.Join(logs, "director.log"))
	d.waitOutput(t, "virt-director: serving on", 60*time.Second)

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
	r := virtIn(t, ns, "--root", root, "agent", "enroll", "--join-file", joinFile, "-o", "json")
	var enrolled agent.Status
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &enrolled) != nil || enrolled.NodeID == "" {
		t.Fatalf("virt agent enroll (in %s): exit %d\nstdout: %s\nstderr: %s", ns, r.code, r.stdout, r.stderr)
	}
	node := enrolled.NodeID
	startChild(t, "virt agent run", filepath.Join(logs, "agent.log"), "ip", "netns", "exec", ns, virtBin, "--root", root, "agent", "run")
	waitNode(t, vd, data, node, 30*time.Second, "Ready and connected", func(n dirNode) bool { return n.State == "Ready" && n.Connected })

	// the task's --wait answer; a failed task exits 1 with the same JSON
	runTask := func(file string, wantCode int) (netTask, time.Duration) {
		t.Helper()
		start := time.Now()
		r := run(t, nil, vd, "--data", data, "task", "run", node, "apply-network", "-f", file, "--trial", "15s", "--wait", "-o", "json")
		var task netTask
		if r.code != wantCode || json.Unmarshal([]byte(r.stdout), &task) != nil {
			t.Fatalf("task run apply-network -f %s --wait: exit %d (want %d)\nstdout: %s\nstderr: %s", filepath.Base(file), r.code, wantCode, r.stdout, r.stderr)
		}
		return task, time.Since(start)
	}

	// kept: a bridge more, the address as it is
	kept := write("kept.yaml", "management:\n  interface: vdn0\n  addresses: [10.91.0.2/24]\nbridges:\n  - name: brkeep\n    addresses: [10.92.0.1/24]\n")
	task, took := runTask(kept, 0)
	if task.Phase != "Succeeded" || task.Result == nil || task.Result.Network == nil || task.Result.Network.TryID == "" ||
		!strings.HasPrefix(task.Result.Network.ConfirmedVia, "10.91.0.2:") {
		t.Fatalf("kept change: got %+v; want Succeeded with a try id, confirmed via 10.91.0.2", task)
	}
	t.Logf("kept change confirmed in %v via %s (try %s)", took.Round(time.Millisecond), task.Result.Network.ConfirmedVia, task.Result.Network.TryID)
	if !linkExists(ns, "brkeep") {
		t.Error("the confirmed bridge brkeep does not exist")
	}
	if out := vns(t, ns, root, "net", "status"); !strings.Contains(out, "no network change pending") {
		t.Errorf("net status after the confirm: %q; want nothing pending", out)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/virtcon/network.yaml")); !strings.Contains(string(b), "brkeep") {
		t.Errorf("the confirmed file is not the desired network.yaml:\n%s", b)
	}

	// cut off: the host's address moves to another subnet
	cut := write("cut.yaml", "management:\n  interface: vdn0\n  addresses: [10.93.0.2/24]\nbridges:\n  - name: brkeep\n    addresses: [10.92.0.1/24]\n")
	task, took = runTask(cut, 1)
	if task.Phase != "Failed" || task.Failure == nil || task.Failure.Reason != "ROLLED_BACK" || !strings.Contains(task.Failure.Message, "watchdog restored") {
		t.Fatalf("cut-off change: got %+v; want Failed ROLLED_BACK by the watchdog", task)
	}
	t.Logf("cut-off change rolled back and reported %v after the task was sent: %s", took.Round(time.Millisecond), task.Failure.Message)
	if got := addrsOf(t, ns, "vdn0"); len(got) != 1 || got[0] != "10.91.0.2/24" {
		t.Errorf("vdn0 after the rollback: %v; want [10.91.0.2/24]", got)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/virtcon/network.yaml")); strings.Contains(string(b), "10.93.0.2") {
		t.Errorf("the rolled-back file became the desired network.yaml:\n%s", b)
	}
	// the agent is back over the old configuration
	waitNode(t, vd, data, node, 10*time.Second, "Ready and connected again", func(n dirNode) bool { return n.State == "Ready" && n.Connected })
}
