package director_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/directortest"
)

// wipeStore deletes every key of the director's prefix: etcd's data lost.
func wipeStore(t *testing.T, h *directortest.Harness) {
	t.Helper()
	s := h.Store(t)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Client().Delete(ctx, s.Prefix(), clientv3.WithPrefix()); err != nil {
		t.Fatalf("wipe the store: %v", err)
	}
}

// waitRecovery waits until the director's recovery file names every one
// of want.
func waitRecovery(t *testing.T, h *directortest.Harness, want ...string) {
	t.Helper()
	path := filepath.Join(h.DataDir, director.RecoveryFileName)
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(path)
		missing := ""
		for _, w := range want {
			if err != nil || !strings.Contains(string(b), w) {
				missing = w
				break
			}
		}
		if missing == "" {
			st, err := os.Stat(path)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("recovery file: %v, mode %v; want 0600", err, st.Mode())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("recovery file %s does not name %s after 20 s (read: %v)", path, missing, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// After etcd loses the director's data, the director comes back with
// the same CA, the enrolled nodes and the revocations from its recovery
// file: a node reconnects with the certificate it holds, a revoked one
// stays refused. Without the file it refuses to make a second CA unless
// told to.
func TestRecoveryAfterDataLoss(t *testing.T) {
	h := directortest.Start(t)
	pin := h.Pin
	kept, keptCert := h.Enroll(t, nil)
	gone, goneCert := h.Enroll(t, nil)
	ctx := context.Background()
	if _, err := h.Admin.RevokeNode(ctx, connect.NewRequest(&directorv1.RevokeNodeRequest{Id: gone, Reason: "test"})); err != nil {
		t.Fatal(err)
	}
	// the revocation's serial is in the file once the revoked node's
	// record says so
	waitRecovery(t, h, kept, gone, `"revokedAt"`)
	h.Stop(t)
	wipeStore(t, h)

	h.Restart(t)
	if h.Pin != pin {
		t.Fatalf("pin after recovery %s; want the CA's %s", h.Pin, pin)
	}
	if c := probe(t, h, keptCert); c != connect.CodeInvalidArgument {
		t.Errorf("the kept node's certificate after recovery: %v; want accepted (InvalidArgument for the bad CSR)", c)
	}
	if c := probe(t, h, goneCert); c != connect.CodeUnauthenticated {
		t.Errorf("the revoked node's certificate after recovery: %v; want Unauthenticated", c)
	}
	if n := h.Node(t, kept); n.GetNode().GetId() != kept {
		t.Errorf("node %s after recovery: %v", kept, n)
	}
	if k := h.AuditKinds(t); k["director.recover"] != 1 {
		t.Errorf("audit after recovery %v; want one director.recover", k)
	}

	// no recovery file: refused, nothing written
	h.Stop(t)
	wipeStore(t, h)
	if err := os.Remove(filepath.Join(h.DataDir, director.RecoveryFileName)); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	d, err := director.Open(octx, h.Options)
	if err == nil {
		d.Close()
		t.Fatal("Open over an empty store with ca.kek and no recovery file succeeded; want ErrSecondCA")
	}
	if !errors.Is(err, director.ErrSecondCA) || !strings.Contains(err.Error(), "--new-ca") {
		t.Fatalf("Open: %v; want ErrSecondCA naming --new-ca", err)
	}
	if v := h.StoreValues(t); len(v) != 0 {
		t.Errorf("the refused start wrote %d keys", len(v))
	}
	// --new-ca: a new CA; the old node's certificate is refused
	h.Options.NewCA = true
	h.Restart(t)
	if h.Pin == pin {
		t.Errorf("--new-ca kept the old pin")
	}
	// refused at the handshake (the client certificate's chain is not
	// this CA's: Unavailable) or per request; never let through
	if c := probe(t, h, keptCert); c == connect.CodeInvalidArgument {
		t.Errorf("an old certificate under a new CA was accepted")
	}
}
