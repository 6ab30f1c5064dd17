package director_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
)

// TestRecoveryFailedHalfwayRetried: a restore from recovery.json that
// fails partway (here a revocation etcd refuses: too large) leaves no CA
// in the store, so the next start restores again; the revoked node stays
// refused after it. Before, the CA was put first: the failed start left
// it, the next one opened it as if nothing were lost and never restored
// the rest (revocations included).
func TestRecoveryFailedHalfwayRetried(t *testing.T) {
	h := directortest.Start(t)
	_, _ = h.Enroll(t, nil)
	gone, goneCert := h.Enroll(t, nil)
	ctx := context.Background()
	if _, err := h.Admin.RevokeNode(ctx, connect.NewRequest(&directorv1.RevokeNodeRequest{Id: gone, Reason: "test"})); err != nil {
		t.Fatal(err)
	}
	waitRecovery(t, h, gone, `"revokedAt"`)
	h.Stop(t)
	wipeStore(t, h)

	path := filepath.Join(h.DataDir, director.RecoveryFileName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(good, &f); err != nil {
		t.Fatal(err)
	}
	var revoked map[string]json.RawMessage
	if err := json.Unmarshal(f["revoked"], &revoked); err != nil {
		t.Fatal(err)
	}
	// over etcd's request limit (1.5 MiB): its put fails
	revoked["00ff"] = json.RawMessage(`"` + strings.Repeat("x", 2<<20) + `"`)
	f["revoked"], _ = json.Marshal(revoked)
	bad, _ := json.Marshal(f)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if d, err := director.Open(octx, h.Options); err == nil {
		d.Close()
		t.Fatal("Open with a revocation etcd refuses succeeded; want the restore's error")
	}
	if v := h.StoreValues(t); v["ca/sealed"] != nil {
		t.Fatalf("a failed restore left the CA in the store (%d keys): the next start would not restore", len(v))
	}

	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	h.Restart(t)
	if c := probe(t, h, goneCert); c != connect.CodeUnauthenticated {
		t.Errorf("the revoked node's certificate after the retried recovery: %v; want Unauthenticated", c)
	}
}
