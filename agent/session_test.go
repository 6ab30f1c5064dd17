package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func TestRefusal(t *testing.T) {
	t.Parallel()
	now := time.Now()
	id := &identity{leaf: &x509.Certificate{NotAfter: now.Add(time.Hour)}}
	expiredID := &identity{leaf: &x509.Certificate{NotAfter: now.Add(-time.Hour)}}
	tests := []struct {
		name string
		id   *identity
		err  error
		want string
	}{
		{"revoked", id, connect.NewError(connect.CodeUnauthenticated, errors.New("certificate revoked")), AlertRevoked},
		{"revoked, wrapped", id, fmt.Errorf("renew: %w", connect.NewError(connect.CodeUnauthenticated, errors.New("certificate revoked"))), AlertRevoked},
		{"expired by the director", id, connect.NewError(connect.CodeUnauthenticated, errors.New("certificate expired")), AlertExpired},
		{"refused, expired here", expiredID, connect.NewError(connect.CodeUnauthenticated, errors.New("certificate revoked")), AlertExpired},
		{"not yet valid: the director's clock", id, connect.NewError(connect.CodeUnauthenticated, errors.New("certificate not yet valid")), ""},
		{"tls alert expired, valid here: the director's clock", id, fmt.Errorf("post: %w", tls.AlertError(45)), ""},
		{"tls alert expired, expired here", expiredID, fmt.Errorf("post: %w", tls.AlertError(45)), AlertExpired},
		{"tls alert bad certificate", id, fmt.Errorf("post: %w", tls.AlertError(42)), AlertRevoked},
		{"tls alert as text", id, errors.New(`unavailable: Post "https://x/": remote error: tls: bad certificate`), AlertRevoked},
		{"tls alert, other", id, tls.AlertError(40), ""},
		{"unavailable", id, connect.NewError(connect.CodeUnavailable, errors.New("revocation list not current")), ""},
		{"permission denied", id, connect.NewError(connect.CodePermissionDenied, errors.New("node id mismatch")), ""},
		{"eof", id, io.EOF, ""},
		{"nil", id, nil, ""},
	}
	for _, tt := range tests {
		if got, _ := refusal(tt.err, tt.id, now); got != tt.want {
			t.Errorf("%s: refusal(%v) = %q; want %q", tt.name, tt.err, got, tt.want)
		}
	}
}
