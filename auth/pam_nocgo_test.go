//go:build !cgo

package auth

import (
	"context"
	"errors"
	"testing"

	"github.com/virtcon/virtcon/paths"
)

func TestLoginWithoutCgo(t *testing.T) {
	layout := paths.New(t.TempDir())
	a := New(layout, nil, Options{})
	_, err := a.Login(context.Background(), "root", "pw", "tty1")
	if !errors.Is(err, ErrPAMUnavailable) {
		t.Fatalf("Login = %v; want ErrPAMUnavailable", err)
	}
	if recs := readAudit(t, layout); len(recs) != 2 || recs[0].Result != "attempt" || recs[1].Result != "error" {
		t.Errorf("audit %+v; want an attempt and an error record", recs)
	}
}
