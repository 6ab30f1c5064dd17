package directorcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/cli/cobrakit"
	"github.com/virtcon/virtcon/internal/output"
	"github.com/virtcon/virtcon/internal/testutil"
)

// Bad flags and arguments are usage errors (exit 2), refused before the
// director is asked anything.
func TestFlagValidation(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown output", []string{"node", "list", "-o", "xml"}, `--output: unknown format "xml"`},
		{"wide is virt's only", []string{"node", "list", "-o", "wide"}, `unknown format "wide"`},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown subcommand", []string{"token", "frobnicate"}, "unknown command"},
		{"unknown flag", []string{"token", "create", "--frob"}, "unknown flag"},
		{"extra argument", []string{"node", "list", "extra"}, "unknown command"},
		{"node show without id", []string{"node", "show"}, "accepts 1 arg"},
		{"ttl not a duration", []string{"token", "create", "--ttl", "soon"}, `"soon" is not a duration`},
		{"ttl negative", []string{"token", "create", "--ttl", "-1h"}, "must not be negative"},
		{"ttl zero", []string{"token", "create", "--ttl", "0"}, "--ttl 0s: want 1m to 24h"},
		{"ttl too short", []string{"token", "create", "--ttl", "30s"}, "--ttl 30s: want 1m to 24h"},
		{"ttl too long", []string{"token", "create", "--ttl", "25h"}, "--ttl 25h0m0s: want 1m to 24h"},
		{"uses too many", []string{"token", "create", "--uses", "1001"}, "--uses 1001: at most 1000"},
		{"node name underscore", []string{"token", "create", "--node-name", "kvm_01"}, "not a hostname"},
		{"node name leading hyphen", []string{"token", "create", "--node-name", "-kvm"}, "not a hostname"},
		{"uses zero", []string{"token", "create", "--uses", "0"}, "--uses 0"},
		{"uses negative", []string{"token", "create", "--uses", "-1"}, "--uses"},
		{"node name with a space", []string{"token", "create", "--node-name", "kvm 01"}, "not a hostname"},
		{"address without port", []string{"token", "create", "--address", "director.example"}, "want HOST:PORT"},
		{"address port zero", []string{"token", "create", "--address", "director.example:0"}, "want 1-65535"},
		{"address bare ipv6", []string{"token", "create", "--address", "2001:db8::1:9443"}, "want HOST:PORT"},
		{"revoke a short id", []string{"token", "revoke", "abc"}, "a token id is 8 characters"},
		{"revoke upper case", []string{"token", "revoke", "ABCDEFGH"}, "a token id is 8 characters"},
		{"node revoke reason too long", []string{"node", "revoke", "kvm-01", "--reason", strings.Repeat("x", 201)}, "at most 200"},
		{"audit since", []string{"audit", "--since", "yesterday"}, `--since "yesterday"`},
		{"audit limit", []string{"audit", "--limit", "-1"}, "--limit -1"},
		{"serve listen", []string{"serve", "--listen", "9443"}, `--listen "9443"`},
		{"serve listen port", []string{"serve", "--listen", ":99999"}, "want 0-65535"},
		{"serve advertise", []string{"serve", "--advertise", "a:b:c"}, "--advertise"},
		{"serve advertise port", []string{"serve", "--advertise", "d.example:0"}, "want 1-65535"},
		{"serve log level", []string{"serve", "--log-level", "loud"}, `--log-level: unknown level "loud"`},
		{"serve log format", []string{"serve", "--log-format", "xml"}, `--log-format: unknown format "xml"`},
		{"serve etcd scheme", []string{"serve", "--etcd-endpoints", "ftp://e:2379"}, `scheme "ftp"`},
		{"serve etcd empty endpoint", []string{"serve", "--etcd-endpoints", "https://e:2379,"}, "empty endpoint"},
		{"serve etcd cacert alone", []string{"serve", "--etcd-cacert", "/ca.pem"}, "only with --etcd-endpoints"},
		{"serve etcd cert without key", []string{"serve", "--etcd-endpoints", "https://e:2379", "--etcd-cert", "/c.pem"}, "go together"},
		{"serve etcd prefix", []string{"serve", "--etcd-prefix", "virtcon"}, "--etcd-prefix"},
		{"serve heartbeat too fast", []string{"serve", "--heartbeat-interval", "500ms"}, "--heartbeat-interval"},
		{"serve degraded before two heartbeats", []string{"serve", "--heartbeat-interval", "10s", "--degraded-after", "15s"}, "--degraded-after"},
		{"serve offline before degraded", []string{"serve", "--degraded-after", "30s", "--offline-after", "30s"}, "--offline-after"},
		{"serve bad duration", []string{"serve", "--offline-after", "soon"}, "--offline-after"},
		{"serve replica id", []string{"serve", "--replica-id", "dir.a"}, `--replica-id "dir.a": want one DNS label`},
		{"serve task retention", []string{"serve", "--task-retention", "10m"}, "--task-retention 10m0s: want at least 1h"},
		{"serve etcd request timeout", []string{"serve", "--etcd-request-timeout", "10ms"}, "--etcd-request-timeout 10ms: want 100ms to 1m"},
		{"completion unknown shell", []string{"completion", "tcsh"}, "unknown shell"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			f := &fakeAdmin{}
			serveFake(t, dir, f)
			served := false
			var out, errOut strings.Builder
			env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
				serve: func(ctx context.Context, env *Env, o *serveOptions) error { served = true; return nil }}
			code := runEnv(context.Background(), append([]string{"--data", dir}, tc.args...), env)
			if code != ExitUsage {
				t.Errorf("exit %d; want %d (stderr: %s)", code, ExitUsage, errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("stderr %q; want it to say %q", errOut.String(), tc.want)
			}
			if n := f.calls.Load(); n != 0 || served {
				t.Errorf("the director was asked %d times (served: %v) for a bad command line", n, served)
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q; want nothing", out.String())
			}
		})
	}
}

// Good flags reach the director as given.
func TestServeOptions(t *testing.T) {
	var got *serveOptions
	var out, errOut strings.Builder
	env := &Env{IO: &IOStreams{Out: &out, ErrOut: &errOut},
		serve: func(ctx context.Context, env *Env, o *serveOptions) error { got = o; return nil }}
	code := runEnv(context.Background(), []string{"serve", "--data", "/srv/vd", "--listen", "127.0.0.1:0", "--advertise", "[2001:db8::1]",
		"--etcd-endpoints", "https://e1:2379,https://e2:2379", "--etcd-cacert", "/ca.pem", "--etcd-cert", "/c.pem", "--etcd-key", "/k.pem",
		"--etcd-prefix", "/vd/test/", "--ca-kek-file", "/run/credentials/kek", "--log-level", "debug", "--log-format", "json",
		"--heartbeat-interval", "2s", "--degraded-after", "6s", "--offline-after", "12s",
		"--replica-id", "dir-a", "--task-retention", "48h", "--etcd-request-timeout", "5s"}, env)
	if code != ExitOK {
		t.Fatalf("exit %d; stderr: %s", code, errOut.String())
	}
	want := serveOptions{Listen: "127.0.0.1:0", Advertise: "[2001:db8::1]", EtcdEndpoints: []string{"https://e1:2379", "https://e2:2379"},
		EtcdCACert: "/ca.pem", EtcdCert: "/c.pem", EtcdKey: "/k.pem", EtcdPrefix: "/vd/test/", KEKFile: "/run/credentials/kek",
		ReplicaID: "dir-a", TaskRetention: 48 * time.Hour, EtcdRequestTimeout: 5 * time.Second,
		LogLevel: "debug", LogFormat: "json", HeartbeatInterval: 2 * time.Second, DegradedAfter: 6 * time.Second, OfflineAfter: 12 * time.Second}
	if fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("serve got %+v; want %+v", *got, want)
	}
	if env.DataDir != "/srv/vd" {
		t.Errorf("--data %q; want /srv/vd", env.DataDir)
	}
}

// clk is the fixed clock of the golden files, in UTC.
var clk = clock{now: testNow, loc: time.UTC}

// node list's three outputs, from fixed data: the JSON is the documented
// stable shape (camelCase, RFC 3339 or null), not protobuf JSON.
func TestNodeListGolden(t *testing.T) {
	for _, format := range []string{output.Table, output.JSON, output.YAML} {
		t.Run(format, func(t *testing.T) {
			var b strings.Builder
			if err := renderNodeList(&b, format, testNodes(), clk); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, b.String())
		})
	}
}

// The JSON promised to scripts: an array of objects with at least id,
// hostname, state, lastSeen (RFC 3339 or null) and certNotAfter.
func TestNodeListJSONContract(t *testing.T) {
	var b strings.Builder
	if err := renderNodeList(&b, output.JSON, testNodes(), clk); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, b.String())
	}
	if len(got) != len(testNodes()) {
		t.Fatalf("%d nodes; want %d", len(got), len(testNodes()))
	}
	states := map[string]bool{"Ready": true, "Degraded": true, "Offline": true, "Revoked": true}
	sawNull := false
	for _, n := range got {
		for _, k := range []string{"id", "hostname", "state", "lastSeen", "certNotAfter", "hostUUID", "certSerial", "connected",
			"agentVersion", "address", "enrolledAt", "revokedAt", "revokeReason"} {
			if _, ok := n[k]; !ok {
				t.Errorf("node %v has no %q", n["id"], k)
			}
		}
		if !states[fmt.Sprint(n["state"])] {
			t.Errorf("node %v: state %v", n["id"], n["state"])
		}
		for _, k := range []string{"lastSeen", "certNotAfter"} {
			switch v := n[k].(type) {
			case nil:
				sawNull = sawNull || k == "lastSeen"
			case string:
				if _, err := time.Parse(time.RFC3339, v); err != nil {
					t.Errorf("node %v: %s %q: %v", n["id"], k, v, err)
				}
			default:
				t.Errorf("node %v: %s is %T", n["id"], k, v)
			}
		}
	}
	if !sawNull {
		t.Error("no node has lastSeen null (kvm-04 was not heard from)")
	}
}

func testNodeDetail() *directorv1.GetNodeResponse {
	n := testNodes()[0] // kvm-02, Offline
	return &directorv1.GetNodeResponse{
		Node: n,
		Host: &directorv1.HostFacts{HostUuid: n.HostUuid, Hostname: n.Hostname, BootId: "6a1d…", AgentVersion: "0.13.0",
			OsPretty: "Debian GNU/Linux 12 (bookworm)", Kernel: "6.1.0-25-cloud-amd64", QemuVersion: "7.2.13"},
		Capabilities: []*directorv1.Capability{
			{Name: "kvm", Available: false, Detail: "kvm_pvm: the probe guest did not run"},
			{Name: "tcg", Available: true, Detail: "qemu-system-x86_64 7.2.13"},
			{Name: "uefi", Available: true, Detail: "/usr/share/OVMF/OVMF_CODE_4M.fd"},
		},
		LastReport: &directorv1.HostReport{CpuPercent: 12.5, MemTotalBytes: 8 << 30, MemAvailableBytes: 6 << 30,
			VmCounts: &directorv1.VMCounts{Running: 1, Stopped: 1}, Acceleration: "tcg", AccelerationReason: "kvm unavailable",
			WorstCheck: &directorv1.CheckSummary{Id: "kvm.usable", Status: "WARN", Detail: "kvm_pvm"}},
		LastReportUnixMs: ms(testNow.Add(-5*time.Minute - 10*time.Second)),
		Vms: []*directorv1.NodeVM{
			{Uid: "0b3e9c1a-2d4f-4a6b-8c0d-1e2f3a4b5c6d", Name: "web-01", Phase: "Running", Class: "MANAGED",
				DisplayPhase: "unknown (last seen Running at 2026-09-01 11:54:50)", ReportedAtUnixMs: ms(testNow.Add(-5*time.Minute - 10*time.Second))},
			{Uid: "7c8d9e0f-1a2b-4c3d-8e4f-5a6b7c8d9e0f", Name: "db-01", Phase: "Stopped", Class: "MANAGED",
				DisplayPhase: "unknown (last seen Stopped at 2026-09-01 11:54:50)", ReportedAtUnixMs: ms(testNow.Add(-5*time.Minute - 10*time.Second))},
		},
	}
}

func TestNodeShowGolden(t *testing.T) {
	for _, format := range []string{output.Table, output.JSON} {
		t.Run(format, func(t *testing.T) {
			var b strings.Builder
			if err := renderNodeShow(&b, format, testNodeDetail(), clk); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, b.String())
		})
	}
}

func TestTokenListGolden(t *testing.T) {
	tokens := []*directorv1.TokenInfo{
		{Id: "k3x9q2ab", State: "active", CreatedAtUnixMs: ms(testNow.Add(-10 * time.Minute)), ExpiresAtUnixMs: ms(testNow.Add(50 * time.Minute)),
			MaxUses: 1, NodeName: "kvm-05", CreatedBy: "root"},
		{Id: "m4n5p6q7", State: "used", CreatedAtUnixMs: ms(testNow.Add(-26 * time.Hour)), ExpiresAtUnixMs: ms(testNow.Add(-25 * time.Hour)),
			Uses: 1, MaxUses: 1, CreatedBy: "root", UsedByNodes: []string{"1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"}},
	}
	for _, format := range []string{output.Table, output.JSON} {
		t.Run(format, func(t *testing.T) {
			var b strings.Builder
			if err := renderTokenList(&b, format, tokens, clk); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, b.String())
		})
	}
}

func TestAuditGolden(t *testing.T) {
	entries := []*directorv1.AuditEntry{
		{TimeUnixMs: ms(testNow.Add(-time.Hour)), Kind: "token.create", TokenId: "k3x9q2ab", Actor: "root", Source: "admin.sock"},
		{TimeUnixMs: ms(testNow.Add(-59 * time.Minute)), Kind: "token.fail", TokenId: "k3x9q2ab", Source: "192.0.2.9:41000", Detail: "bad secret"},
		{TimeUnixMs: ms(testNow.Add(-58 * time.Minute)), Kind: "cert.issue", TokenId: "k3x9q2ab", NodeId: "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
			Serial: "1f", Source: "192.0.2.11:41822"},
	}
	for _, format := range []string{output.Table, output.JSON, output.YAML} {
		t.Run(format, func(t *testing.T) {
			var b strings.Builder
			if err := renderAudit(&b, format, entries, clk); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, b.String())
		})
	}
}

// A node's hostname is what the node says: it cannot drive the
// operator's terminal.
func TestNodeListDropsTerminalControls(t *testing.T) {
	nodes := []*directorv1.NodeInfo{{Id: "1a2b3c4d-0000-4000-8000-000000000000", Hostname: "evil\x1b]0;pwned\x07\x1b[2J", State: "Ready"}}
	var b strings.Builder
	if err := renderNodeList(&b, output.Table, nodes, clk); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Errorf("table keeps terminal controls: %q", b.String())
	}
}

func TestMatchNode(t *testing.T) {
	nodes := append(testNodes(), &directorv1.NodeInfo{Id: "1a2b9999-0000-4000-8000-000000000000", Hostname: "kvm-01"})
	tests := []struct {
		ref, want string // want: an id, or "error: " and a part of the message
	}{
		{"9b2f6c1e-0d4a-4c3b-8e5f-7a6b5c4d3e2f", "9b2f6c1e-0d4a-4c3b-8e5f-7a6b5c4d3e2f"},
		{"9b2f6c1e", "9b2f6c1e-0d4a-4c3b-8e5f-7a6b5c4d3e2f"},
		{"9B2F6C1E", "9b2f6c1e-0d4a-4c3b-8e5f-7a6b5c4d3e2f"},
		{"kvm-03", "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"},
		{"kvm-01", "error: 2 nodes have that hostname"},
		{"1a2b", "error: 2 nodes have that id prefix"},
		{"1a2b3c4d", "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"},
		{"9b2", "error: no such node"},
		{"nothere", "error: no such node"},
	}
	for _, tc := range tests {
		n, err := matchNode(nodes, tc.ref)
		if msg, ok := strings.CutPrefix(tc.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), msg) {
				t.Errorf("matchNode(%q) = %v, %v; want an error saying %q", tc.ref, n.GetId(), err, msg)
			}
			continue
		}
		if err != nil || n.GetId() != tc.want {
			t.Errorf("matchNode(%q) = %v, %v; want %s", tc.ref, n.GetId(), err, tc.want)
		}
	}
}

func TestExitCodeMapping(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{errors.New("boom"), ExitError},
		{&UsageError{errors.New("bad")}, ExitUsage},
		{ErrNotPermitted, ExitNotPermitted},
		{os.ErrPermission, ExitNotPermitted},
		{context.Canceled, ExitCanceled},
		{connect.NewError(connect.CodePermissionDenied, errors.New("uid 1000 is not root")), ExitNotPermitted},
		{connect.NewError(connect.CodeUnauthenticated, errors.New("no")), ExitNotPermitted},
		{connect.NewError(connect.CodeInvalidArgument, errors.New("ttl_ms: want > 0")), ExitUsage},
		{connect.NewError(connect.CodeFailedPrecondition, errors.New("node is Ready")), ExitError},
		{connect.NewError(connect.CodeNotFound, errors.New("no node")), ExitError},
		{connect.NewError(connect.CodeUnavailable, errors.New("dial")), ExitError},
		{connect.NewError(connect.CodeInternal, errors.New("etcd")), ExitError},
		{connect.NewError(connect.CodeCanceled, context.Canceled), ExitCanceled},
		{fmt.Errorf("node revoke x: %w", connect.NewError(connect.CodePermissionDenied, nil)), ExitNotPermitted},
		{&remoteError{msg: "worded", err: connect.NewError(connect.CodeInvalidArgument, nil)}, ExitUsage},
		{connect.NewError(connect.CodeUnavailable, fmt.Errorf("dial: %w", os.ErrPermission)), ExitNotPermitted},
	}
	for _, tc := range tests {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
}

// The director's errors, over a real socket: their words and exit codes.
func TestAdminErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		args []string
		code int
		want string
	}{
		{"permission denied", connect.NewError(connect.CodePermissionDenied, errors.New("uid 1000 may not administer this director")),
			[]string{"node", "list"}, ExitNotPermitted, "node list: uid 1000 may not administer this director (the admin socket takes root"},
		{"invalid argument", connect.NewError(connect.CodeInvalidArgument, errors.New("ttl_ms: want at most 168h")),
			[]string{"token", "create"}, ExitUsage, "token create: ttl_ms: want at most 168h"},
		{"not found", connect.NewError(connect.CodeNotFound, errors.New(`node "kvm-01": not found`)),
			[]string{"node", "show", "kvm-01"}, ExitError, `node show kvm-01: node "kvm-01": not found (virt-director node list)`},
		{"failed precondition", connect.NewError(connect.CodeFailedPrecondition, errors.New("node kvm-01 is Ready")),
			[]string{"node", "forget", "kvm-01"}, ExitError, "node forget kvm-01: node kvm-01 is Ready (only a Revoked or Offline node is forgotten"},
		{"internal", connect.NewError(connect.CodeInternal, errors.New("etcd: request timed out")),
			[]string{"node", "revoke", "kvm-01"}, ExitError, "node revoke kvm-01: etcd: request timed out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			fail := func() error { return tc.err }
			f := &fakeAdmin{nodes: testNodes(),
				getNode:     func(*directorv1.GetNodeRequest) (*directorv1.GetNodeResponse, error) { return nil, fail() },
				createToken: func(*directorv1.CreateTokenRequest) (*directorv1.CreateTokenResponse, error) { return nil, fail() },
				revokeNode:  func(*directorv1.RevokeNodeRequest) (*directorv1.RevokeNodeResponse, error) { return nil, fail() },
				forgetNode:  func(*directorv1.ForgetNodeRequest) error { return fail() },
			}
			if tc.args[1] == "list" {
				f.listErr = tc.err
			}
			serveFake(t, dir, f)
			out, errOut, code := runCLI(t, dir, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d; want %d (stderr: %s)", code, tc.code, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q; want it to say %q", errOut, tc.want)
			}
			if out != "" {
				t.Errorf("stdout %q; want nothing", out)
			}
		})
	}
}

// No director: no socket, or one nobody listens on, or one the user may
// not open.
func TestDirectorNotRunning(t *testing.T) {
	t.Run("no socket", func(t *testing.T) {
		dir := shortDir(t)
		_, errOut, code := runCLI(t, dir, "node", "list")
		want := fmt.Sprintf("virt-director: director not running (no socket at %s)\n", filepath.Join(dir, "admin.sock"))
		if code != ExitError || errOut != want {
			t.Errorf("exit %d, stderr %q; want %d, %q", code, errOut, ExitError, want)
		}
	})
	t.Run("stale socket", func(t *testing.T) {
		dir := shortDir(t)
		ln, err := net.Listen("unix", filepath.Join(dir, "admin.sock"))
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		_, errOut, code := runCLI(t, dir, "token", "list")
		if code != ExitError || !strings.Contains(errOut, "director not running (nothing listens on") {
			t.Errorf("exit %d, stderr %q; want %d and nothing listens", code, errOut, ExitError)
		}
	})
	t.Run("not permitted", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root opens any socket: needs an unprivileged user")
		}
		dir := shortDir(t)
		serveFake(t, dir, &fakeAdmin{})
		if err := os.Chmod(filepath.Join(dir, "admin.sock"), 0); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := runCLI(t, dir, "node", "list")
		if code != ExitNotPermitted || !strings.Contains(errOut, "permission denied (the admin socket is root's") {
			t.Errorf("exit %d, stderr %q; want %d and permission denied", code, errOut, ExitNotPermitted)
		}
	})
}

const testJoin = "vcj1:k3x9q2ab.0123456789abcdefghijklmnopqrstuv@director.example:9443#sha256:" +
	"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

const testSecret = "0123456789abcdefghijklmnopqrstuv"

// token create prints the join string once, to stdout, and nothing else
// carries it: not the hint on stderr, in any format.
func TestTokenCreate(t *testing.T) {
	tests := []struct {
		format string
		check  func(t *testing.T, out string)
	}{
		{output.Table, func(t *testing.T, out string) {
			if out != testJoin+"\n" {
				t.Errorf("stdout %q; want the join string alone on its line", out)
			}
		}},
		{output.JSON, func(t *testing.T, out string) {
			var got map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"id": "k3x9q2ab", "joinString": testJoin, "expiresAt": "2026-09-01T13:00:00Z"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("stdout %v; want %v", got, want)
			}
		}},
		{output.YAML, func(t *testing.T, out string) {
			if !strings.Contains(out, "joinString: "+testJoin) || !strings.Contains(out, "id: k3x9q2ab") {
				t.Errorf("stdout %q; want id and joinString", out)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.format, func(t *testing.T) {
			dir := shortDir(t)
			var got *directorv1.CreateTokenRequest
			serveFake(t, dir, &fakeAdmin{createToken: func(r *directorv1.CreateTokenRequest) (*directorv1.CreateTokenResponse, error) {
				got = r
				return &directorv1.CreateTokenResponse{Id: "k3x9q2ab", JoinString: testJoin, ExpiresAtUnixMs: ms(testNow.Add(time.Hour))}, nil
			}})
			out, errOut, code := runCLI(t, dir, "token", "create", "-o", tc.format, "--ttl", "90m", "--uses", "3",
				"--node-name", "kvm-05", "--address", "[2001:db8::1]:9443")
			if code != ExitOK {
				t.Fatalf("exit %d; stderr %s", code, errOut)
			}
			tc.check(t, out)
			if n := strings.Count(out, testSecret); n != 1 {
				t.Errorf("stdout holds the secret %d times; want once", n)
			}
			if strings.Contains(errOut, testSecret) {
				t.Errorf("stderr holds the secret: %q", errOut)
			}
			if tc.format == output.Table && !strings.Contains(errOut, "give it to the host: virt agent enroll < FILE; it expires at 2026-09-01 13:00:00 (in 1h)") {
				t.Errorf("stderr %q; want the hint", errOut)
			}
			want := &directorv1.CreateTokenRequest{TtlMs: 90 * 60 * 1000, MaxUses: 3, NodeName: "kvm-05", Address: "[2001:db8::1]:9443"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("request %v; want %v", got, want)
			}
		})
	}
}

// A token or join string pasted as token revoke's id is refused without
// being echoed.
func TestTokenRevokeRefusesSecrets(t *testing.T) {
	for _, arg := range []string{testJoin, "k3x9q2ab." + testSecret, testSecret} {
		dir := shortDir(t)
		f := &fakeAdmin{}
		serveFake(t, dir, f)
		out, errOut, code := runCLI(t, dir, "token", "revoke", arg)
		if code != ExitUsage {
			t.Errorf("exit %d; want %d", code, ExitUsage)
		}
		if strings.Contains(out+errOut, testSecret) || strings.Contains(out+errOut, "0123456789") {
			t.Errorf("the secret is echoed: stdout %q, stderr %q", out, errOut)
		}
		if f.calls.Load() != 0 {
			t.Error("the director was asked")
		}
	}
}

// node revoke and forget name the node the operator meant, by id.
func TestNodeRevokeForget(t *testing.T) {
	dir := shortDir(t)
	var revoked, forgotten string
	serveFake(t, dir, &fakeAdmin{nodes: testNodes(),
		revokeNode: func(r *directorv1.RevokeNodeRequest) (*directorv1.RevokeNodeResponse, error) {
			revoked = r.Id + " " + r.Reason
			n := testNodes()[2]
			n.State, n.RevokeReason = "Revoked", r.Reason
			return &directorv1.RevokeNodeResponse{Node: n}, nil
		},
		forgetNode: func(r *directorv1.ForgetNodeRequest) error { forgotten = r.Id; return nil },
	})
	out, errOut, code := runCLI(t, dir, "node", "revoke", "kvm-03", "--reason", "disk failed")
	if code != ExitOK || revoked != "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9 disk failed" {
		t.Fatalf("exit %d, revoked %q; stderr %s", code, revoked, errOut)
	}
	if out != "node 5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9 (kvm-03) revoked; its VMs are untouched\n" {
		t.Errorf("stdout %q", out)
	}
	out, errOut, code = runCLI(t, dir, "node", "forget", "c0ffee00", "-o", "json")
	if code != ExitOK || forgotten != "c0ffee00-1111-4222-8333-444455556666" {
		t.Fatalf("exit %d, forgot %q; stderr %s", code, forgotten, errOut)
	}
	if !strings.Contains(out, `"forgotten": true`) {
		t.Errorf("stdout %q", out)
	}
}

// The admin socket refused by file permissions is exit 4, whatever user
// runs the test (root opens any socket, so the dial error is made here).
func TestWordErrorPermission(t *testing.T) {
	env := &Env{DataDir: shortDir(t)}
	cause := connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)})
	f, err := os.Create(env.Socket()) // the socket's path exists
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = env.wordError("node list", cause)
	if got := ExitCode(err); got != ExitNotPermitted {
		t.Errorf("exit %d; want %d", got, ExitNotPermitted)
	}
	want := fmt.Sprintf("node list: %s: permission denied (the admin socket is root's: run it with sudo)", env.Socket())
	if err.Error() != want {
		t.Errorf("error %q; want %q", err, want)
	}
}

// The generated reference must match the commands; `make docs` refreshes it.
func TestReferenceUpToDate(t *testing.T) {
	var buf strings.Builder
	if err := cobrakit.Reference(&buf, NewRootCmd(&Env{IO: &IOStreams{}})); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "docs", "virt-director-reference.md"))
	if err != nil {
		t.Fatalf("docs/virt-director-reference.md: %v (run make docs)", err)
	}
	if buf.String() != string(want) {
		t.Error("docs/virt-director-reference.md is out of date: run `make docs`")
	}
}

func TestAuditFollow(t *testing.T) {
	e := func(min int, kind string) *directorv1.AuditEntry {
		return &directorv1.AuditEntry{TimeUnixMs: ms(testNow.Add(time.Duration(min) * time.Minute)), Kind: kind, Actor: "root"}
	}
	listed := []*directorv1.AuditEntry{e(-2, "token.create"), e(-1, "token.revoke")}
	// the stream repeats what the list had (it began first), then goes on
	followed := []*directorv1.AuditEntry{e(-2, "token.create"), e(-1, "token.revoke"), e(-1, "node.revoke"), e(0, "node.forget")}

	t.Run("director goes away", func(t *testing.T) {
		dir := shortDir(t)
		f := &auditFake{listed: listed, followed: followed}
		serveAudit(t, dir, f)
		out, errOut, code := runCLI(t, dir, "audit", "-f", "--since", "1h", "--limit", "10", "-o", "json")
		if code != ExitError || !strings.Contains(errOut, "the director ended the stream") {
			t.Errorf("exit %d, stderr %q; want %d and the stream's end", code, errOut, ExitError)
		}
		var kinds []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var v AuditEntry
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("line %q: not one JSON object: %v", line, err)
			}
			kinds = append(kinds, v.Kind)
		}
		if got, want := strings.Join(kinds, " "), "token.create token.revoke node.revoke node.forget"; got != want {
			t.Errorf("entries %s; want %s, each once", got, want)
		}
		if f.listReq.GetLimit() != 10 || f.listReq.GetSinceUnixMs() != ms(testNow.Add(-time.Hour)) {
			t.Errorf("ListAudit %v; want limit 10 since an hour ago", f.listReq)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		dir := shortDir(t)
		f := &auditFake{listed: listed, followed: followed, hold: true, following: make(chan struct{})}
		serveAudit(t, dir, f)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-f.following; time.Sleep(100 * time.Millisecond); cancel() }()
		var out, errOut strings.Builder
		env := &Env{IO: &IOStreams{Out: &out, ErrOut: &errOut}, Now: func() time.Time { return testNow }, Loc: time.UTC}
		code := runEnv(ctx, []string{"--data", dir, "audit", "--follow"}, env)
		if code != ExitOK {
			t.Errorf("exit %d (stderr %q); want 0: interrupting a follow ends it", code, errOut.String())
		}
		if n := strings.Count(out.String(), "\n"); n != 4 {
			t.Errorf("%d lines; want 4:\n%s", n, out.String())
		}
	})
}
