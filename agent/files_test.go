package agent

import (
	"encoding/pem"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/paths"
)

// Enrolment's files: dir 0700, files 0600; identity.pem is the key, the
// leaf and the intermediate; the pending key and an old alert are gone.
func TestStoreEnrolment(t *testing.T) {
	t.Parallel()
	l := paths.New(t.TempDir())
	ca := newTestCA(t)
	if err := writeAlert(l, &alert{Kind: AlertRevoked, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	pk, _ := enroll.NewKey()
	if err := ensureDir(l); err != nil {
		t.Fatal(err)
	}
	if err := writePendingKey(l, pk); err != nil {
		t.Fatal(err)
	}
	key := enrolled(t, l, ca, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))

	st, err := os.Stat(l.AgentDir())
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, mode %v; want 0700", l.AgentDir(), err, st.Mode().Perm())
	}
	for _, p := range []string{IdentityFile(l), CAFile(l), ConfigFile(l)} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v; want mode 0600", p, err)
		}
	}
	for _, p := range []string{PendingKeyFile(l), AlertFile(l)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after enrolment: %v; want it gone", p, err)
		}
	}
	b, _ := os.ReadFile(IdentityFile(l))
	var types []string
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		types = append(types, blk.Type)
	}
	if got := strings.Join(types, ","); got != "PRIVATE KEY,CERTIFICATE,CERTIFICATE" {
		t.Errorf("identity.pem blocks %s; want the key, the leaf and the intermediate", got)
	}
	id, err := loadIdentity(l)
	if err != nil {
		t.Fatal(err)
	}
	if !id.key.Equal(key) || !id.root.Equal(ca.root) || len(id.chain) != 1 || !id.chain[0].Equal(ca.inter) {
		t.Errorf("loaded identity is not the stored one")
	}

	if err := removeCredentials(l); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(l.AgentDir())
	if len(ents) != 0 {
		t.Errorf("after removeCredentials: %v left", ents)
	}
	if _, err := loadIdentity(l); err == nil || !strings.Contains(err.Error(), ErrNotEnrolled.Error()) {
		t.Errorf("loadIdentity after removal: %v; want ErrNotEnrolled", err)
	}
}

func TestParseIdentityRefuses(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	key, _ := enroll.NewKey()
	other, _ := enroll.NewKey()
	leaf := ca.node(t, &key.PublicKey, testNodeID, time.Now(), time.Now().Add(time.Hour))
	kp, _ := enroll.MarshalKey(key)
	op, _ := enroll.MarshalKey(other)
	tests := []struct {
		name, want string
		data       []byte
	}{
		{"another key's certificate", "not for the key", append(op, certPEM(leaf)...)},
		{"no key", "no private key", certPEM(leaf)},
		{"no certificate", "no certificate", kp},
		{"two keys", "two private keys", append(append(kp, kp...), certPEM(leaf)...)},
		{"garbage after", "not PEM", append(append(kp, certPEM(leaf)...), []byte("junk")...)},
	}
	for _, tt := range tests {
		if _, _, err := parseIdentity(tt.data); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want %q", tt.name, err, tt.want)
		}
	}
}
