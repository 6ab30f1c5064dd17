package diag

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/testutil"
)

func TestWriteRedactsAndRecordsErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.tar.gz")
	parts := []Part{
		{Name: "vm.json", Collect: func(context.Context) (any, error) {
			return map[string]any{"name": "web", "cloudInit": map[string]any{"userData": "#cloud-config\npassword: hunter2"}}, nil
		}},
		{Name: "broken.json", Collect: func(context.Context) (any, error) {
			return nil, errors.New("reading token=s3cr3t failed")
		}},
	}
	names, err := Write(context.Background(), testutil.Logger(t), path, parts)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "vm.json,errors.json" {
		t.Errorf("names %v; want vm.json, errors.json", names)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", st.Mode().Perm())
	}
	f, _ := os.Open(path)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode != 0o600 {
			t.Errorf("%s: mode %o; want 600", h.Name, h.Mode)
		}
		io.Copy(&all, tr)
	}
	for _, secret := range []string{"hunter2", "s3cr3t"} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("bundle contains the secret %q", secret)
		}
	}
	if !strings.Contains(all.String(), "broken.json") {
		t.Error("errors.json does not name the failed part")
	}
}
