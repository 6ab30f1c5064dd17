package director_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/internal/testutil"
)

// No token secret and no private key ever reaches the director's log, its
// audit trail or its etcd values: through a whole life of enrolments,
// failures, retries, replays, sessions and revocations.
func TestNoSecretsInLogsAuditOrStore(t *testing.T) {
	var logs testutil.Buffer
	h := directortest.Start(t, func(o *director.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.Etcd.Logger = o.Logger
	})
	ctx := context.Background()
	var secrets, keys []string
	join := func(req *directorv1.CreateTokenRequest) enroll.Join {
		j := h.Token(t, req)
		secrets = append(secrets, j.Secret())
		return j
	}
	key := newKey(t)
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := enroll.MarshalKey(key)
	raw, err := key.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	keys = append(keys, hex.EncodeToString(der), hex.EncodeToString(raw), string(pk),
		strings.Split(string(pem.EncodeToMemory(&pem.Block{Type: "X", Bytes: der})), "\n")[1])

	j := join(nil)
	e, err := h.EnrollWith(ctx, j, key, "leak-a")
	if err != nil {
		t.Fatal(err)
	}
	h.EnrollWith(ctx, j, key, "leak-a")                                                         // retry
	h.EnrollWith(ctx, j, newKey(t), "leak-a")                                                   // replay
	h.EnrollWith(ctx, join(&directorv1.CreateTokenRequest{NodeName: "x"}), newKey(t), "leak-b") // name mismatch
	bad, _ := enroll.NewJoin(j.ID(), strings.Repeat("z", enroll.SecretLen), j.Addr(), j.Pin())
	secrets = append(secrets, bad.Secret())
	h.EnrollWith(ctx, bad, newKey(t), "leak-c") // wrong secret
	// A malformed token: a secret alone, without the id.
	lone := join(nil)
	h.EnrollClient().Enroll(ctx, connect.NewRequest(&directorv1.EnrollRequest{Token: lone.Secret()}))
	h.EnrollClient().Enroll(ctx, connect.NewRequest(&directorv1.EnrollRequest{Token: lone.Secret() + "." + lone.Secret()}))
	h.Admin.ListTokens(ctx, connect.NewRequest(&directorv1.ListTokensRequest{}))

	agent, hc := h.AgentClient(e.Cert)
	defer hc.CloseIdleConnections()
	s, _ := openSession(t, agent, e.NodeID)
	s.heartbeat(1)
	h.Admin.RevokeNode(ctx, connect.NewRequest(&directorv1.RevokeNodeRequest{Id: e.NodeID}))

	var audit bytes.Buffer
	for _, a := range h.Audit(t) {
		b, err := protojson.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		audit.Write(b)
		audit.WriteByte('\n')
	}
	if audit.Len() == 0 || logs.String() == "" {
		t.Fatal("nothing captured: the test would prove nothing")
	}
	var store bytes.Buffer
	for k, v := range h.StoreValues(t) {
		store.WriteString(k + " ")
		store.Write(v)
		store.WriteByte('\n')
	}
	for what, text := range map[string]string{"log": logs.String(), "audit": audit.String(), "etcd": store.String()} {
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("the %s holds a token secret", what)
			}
		}
		for _, k := range keys {
			if strings.Contains(text, k) {
				t.Errorf("the %s holds the node's private key", what)
			}
		}
	}
	if !strings.Contains(audit.String(), j.ID()) {
		t.Errorf("the audit does not name the token id %s: the scan looked at the wrong thing", j.ID())
	}
}

// A create-vm's manifest may hold cloud-init user data, a secret: once
// the task has ended it is nowhere in the director's store (not even
// base64-encoded inside a JSON value), and never in its log, its audit
// trail or what the admin API shows.
func TestNoUserDataAfterCreateVM(t *testing.T) {
	var logs testutil.Buffer
	h := directortest.Start(t, func(o *director.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.Etcd.Logger = o.Logger
	})
	ctx := context.Background()
	secret := "ud-" + uuid.NewString()
	manifest := "apiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata:\n  name: web\nspec:\n  cloudInit:\n    userData: |\n      #cloud-config\n      password: " + secret + "\n"
	a := newTaskAgent(t, h, allKinds...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("the director's log:\n" + logs.String())
		}
	})
	task := &directorv1.Task{Id: uuid.NewString(), Kind: &directorv1.Task_CreateVm{CreateVm: &directorv1.CreateVM{Manifest: []byte(manifest)}}}
	ti := createTask(t, h, a.node, task)
	if got := a.next().GetTask().GetCreateVm().GetManifest(); string(got) != manifest {
		t.Fatalf("the agent got manifest %q, want the one created", got)
	}
	// While pending the store holds it (the agent may need it again);
	// the scan below proves it can see it there.
	if !strings.Contains(allStored(t, h), secret) {
		t.Fatal("the pending task's manifest is not found in the store: the scan would prove nothing")
	}
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 1, Phase: directorv1.TaskPhase_TASK_PHASE_QUEUED})
	a.status(&directorv1.TaskStatus{TaskId: task.GetId(), Seq: 2, Phase: directorv1.TaskPhase_TASK_PHASE_SUCCEEDED})
	waitPhase(t, h, task.GetId(), directorv1.TaskPhase_TASK_PHASE_SUCCEEDED)
	// A retry of the same task still matches it by the manifest's SHA-256.
	if again := createTask(t, h, a.node, task); again.GetId() != ti.GetId() || again.GetPhase() != directorv1.TaskPhase_TASK_PHASE_SUCCEEDED {
		t.Errorf("retried create-vm: %v, want the stored task", again)
	}
	list, _ := h.Admin.ListTasks(ctx, connect.NewRequest(&directorv1.ListTasksRequest{}))
	shown, _ := protojson.Marshal(list.Msg)
	var audit bytes.Buffer
	for _, e := range h.Audit(t) {
		b, _ := protojson.Marshal(e)
		audit.Write(b)
	}
	for what, text := range map[string]string{"store": allStored(t, h), "log": logs.String(), "audit": audit.String(), "ListTasks": string(shown)} {
		if strings.Contains(text, secret) {
			t.Errorf("the %s holds the create-vm's user data after the task ended", what)
		}
	}
}

// allStored is every key and value in the director's store, and every
// JSON string in them that decodes as base64, decoded.
func allStored(t *testing.T, h *directortest.Harness) string {
	t.Helper()
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			if raw, err := base64.StdEncoding.DecodeString(x); err == nil {
				b.Write(raw)
				b.WriteByte('\n')
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	for k, v := range h.StoreValues(t) {
		b.WriteString(k + " ")
		b.Write(v)
		b.WriteByte('\n')
		var j any
		if json.Unmarshal(v, &j) == nil {
			walk(j)
		}
	}
	return b.String()
}
