package directorcli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/enroll"
)

func TestMain(m *testing.M) { directortest.Main(m) }

// runReal runs virt-director against a real director's --data, at the
// real clock.
func runReal(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut strings.Builder
	code := runEnv(t.Context(), append([]string{"--data", dir}, args...), &Env{IO: &IOStreams{Out: &out, ErrOut: &errOut}})
	return out.String(), errOut.String(), code
}

// The commands against a real director (real etcd, the real admin
// socket): a token made, used by a host's enrolment, the node listed,
// shown, revoked and forgotten, the audit log telling it; and serve
// itself, from the ready line to a graceful stop.
func TestAgainstDirector(t *testing.T) {
	h := directortest.Start(t)

	out, errOut, code := runReal(t, h.DataDir, "token", "create", "-o", "json", "--ttl", "10m", "--node-name", "kvm-01")
	if code != ExitOK {
		t.Fatalf("token create: exit %d: %s", code, errOut)
	}
	var created TokenCreated
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("token create -o json: %v\n%s", err, out)
	}
	join, err := enroll.ParseJoin(created.JoinString)
	if err != nil {
		t.Fatalf("token create's join string: %v", err)
	}
	if join.ID() != created.ID || join.Pin() != h.Pin {
		t.Errorf("join string id %s pin %s; want %s and the director's %s", join.ID(), join.Pin(), created.ID, h.Pin)
	}
	key, err := enroll.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e, err := h.EnrollWith(ctx, join, key, "kvm-01")
	if err != nil {
		t.Fatalf("enrol with the CLI's token: %v", err)
	}

	out, errOut, code = runReal(t, h.DataDir, "node", "list", "-o", "json")
	var nodes []Node
	if code != ExitOK || json.Unmarshal([]byte(out), &nodes) != nil || len(nodes) != 1 {
		t.Fatalf("node list: exit %d, %q (stderr %s); want the one node", code, out, errOut)
	}
	if n := nodes[0]; n.ID != e.NodeID || n.Hostname != "kvm-01" || n.CertNotAfter == nil || n.State == "" {
		t.Errorf("node list: %+v; want node %s, kvm-01, with a certificate end and a state", n, e.NodeID)
	}
	out, errOut, code = runReal(t, h.DataDir, "node", "show", shortID(e.NodeID))
	if code != ExitOK || !strings.Contains(out, "Hostname:     kvm-01") || !strings.Contains(out, "tcg") {
		t.Errorf("node show: exit %d, stderr %s:\n%s", code, errOut, out)
	}
	out, errOut, code = runReal(t, h.DataDir, "token", "list", "-o", "json")
	var tokens []Token
	if code != ExitOK || json.Unmarshal([]byte(out), &tokens) != nil || len(tokens) != 1 || tokens[0].State != "used" {
		t.Errorf("token list: exit %d, stderr %s: %s; want the one token, used", code, errOut, out)
	}
	if strings.Contains(out, join.Secret()) {
		t.Error("token list prints the secret")
	}

	if _, errOut, code = runReal(t, h.DataDir, "node", "forget", "kvm-01"); code != ExitError || !strings.Contains(errOut, "revoke it first") {
		t.Errorf("node forget of a live node: exit %d, %q; want %d, revoke it first", code, errOut, ExitError)
	}
	if _, errOut, code = runReal(t, h.DataDir, "node", "revoke", "kvm-01", "--reason", "test"); code != ExitOK {
		t.Fatalf("node revoke: exit %d: %s", code, errOut)
	}
	h.WaitNodeState(t, e.NodeID, "Revoked", 5*time.Second)
	if _, errOut, code = runReal(t, h.DataDir, "node", "forget", e.NodeID); code != ExitOK {
		t.Errorf("node forget: exit %d: %s", code, errOut)
	}
	if _, errOut, code = runReal(t, h.DataDir, "token", "revoke", "zzzzzzzz"); code != ExitError || !strings.Contains(errOut, "(virt-director token list)") {
		t.Errorf("token revoke of no token: exit %d, %q; want %d and the hint", code, errOut, ExitError)
	}
	out, errOut, code = runReal(t, h.DataDir, "audit", "-o", "json")
	var entries []AuditEntry
	if code != ExitOK || json.Unmarshal([]byte(out), &entries) != nil {
		t.Fatalf("audit: exit %d, stderr %s: %s", code, errOut, out)
	}
	kinds := map[string]bool{}
	for _, en := range entries {
		kinds[en.Kind] = true
	}
	for _, k := range []string{"token.create", "cert.issue", "node.revoke", "node.forget"} {
		if !kinds[k] {
			t.Errorf("audit has no %s: %v", k, kinds)
		}
	}
	if strings.Contains(out, join.Secret()) {
		t.Error("the audit log holds the secret")
	}

	t.Run("serve", func(t *testing.T) {
		dir := shortDir(t)
		pr, pw := io.Pipe()
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan int, 1)
		go func() {
			defer pw.Close()
			done <- runEnv(ctx, []string{"--data", dir, "serve", "--listen", "127.0.0.1:0", "--advertise", "127.0.0.1",
				"--etcd-endpoints", h.Options.Etcd.Endpoints[0], "--etcd-prefix", "/directorcli-serve/" + created.ID + "/", "--log-level", "warn"},
				&Env{IO: &IOStreams{Out: io.Discard, ErrOut: pw}})
		}()
		ready := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "virt-director: serving on ") {
					ready <- sc.Text()
				}
			}
		}()
		var line string
		select {
		case line = <-ready:
		case code := <-done:
			t.Fatalf("serve exited %d before it was ready", code)
		case <-time.After(time.Minute):
			t.Fatal("serve: no ready line in a minute")
		}
		if !strings.Contains(line, ", CA pin sha256:") || !strings.HasPrefix(line, "virt-director: serving on 127.0.0.1:") {
			t.Errorf("ready line %q", line)
		}
		out, errOut, code := runReal(t, dir, "token", "create")
		if code != ExitOK || !strings.HasPrefix(out, enroll.JoinPrefix) || !strings.Contains(out, "@127.0.0.1:") {
			t.Errorf("token create on serve's socket: exit %d, %q, stderr %s", code, out, errOut)
		}
		stop()
		select {
		case code := <-done:
			if code != ExitOK {
				t.Errorf("serve stopped with exit %d; want 0", code)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop 30 s after its context ended")
		}
		if _, errOut, code := runReal(t, dir, "node", "list"); code != ExitError || !strings.Contains(errOut, "director not running (no socket at") {
			t.Errorf("after serve stopped: exit %d, %q; want no socket", code, errOut)
		}
	})
}
