package netcfg

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/paths"
)

func TestReapplyWithoutRecord(t *testing.T) {
	layout := paths.New(t.TempDir())
	s := NewService(layout, nil)
	res, err := s.Reapply(context.Background())
	if res != nil || err != nil {
		t.Fatalf("Reapply with nothing applied = %+v, %v; want nil, nil", res, err)
	}
	if err := os.MkdirAll(layout.NetworkDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(AppliedFile(layout), []byte("apiVersion: virtcon/v1\nkind: HostNetwork\nbridges: {oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reapply(context.Background()); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("Reapply of a damaged record = %v; want the record named damaged", err)
	}
}
