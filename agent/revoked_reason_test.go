package agent

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// A Revoked message before the refusal puts the director's reason (the
// admin's words) into the alert; without one the refusal alone speaks.
func TestRevokedReasonInAlert(t *testing.T) {
	now := time.Now()
	id := &identity{cfg: &Config{Director: "d:9443"}, leaf: &x509.Certificate{NotAfter: now.Add(time.Hour)}}
	refused := connect.NewError(connect.CodeUnauthenticated, errors.New("certificate revoked"))
	for _, tc := range []struct{ why, want string }{
		{"host decommissioned", "certificate revoked (host decommissioned)"},
		{"", "certificate revoked"},
	} {
		r := &runner{id: id, now: func() time.Time { return now }, revokedWhy: tc.why}
		end := r.ended(true, refused)
		if end.refusal != AlertRevoked || !strings.HasSuffix(end.reason, tc.want) {
			t.Errorf("why %q: refusal %q reason %q; want %s ending %q", tc.why, end.refusal, end.reason, AlertRevoked, tc.want)
		}
	}
}
