package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/paths"
)

func TestShippedPolicyIsTheDefault(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "packaging", "etc", "host.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePolicy(b)
	if err != nil {
		t.Fatalf("the shipped example: %v", err)
	}
	d := DefaultPolicy()
	if p.OnBoot != d.OnBoot || p.OnShutdown != d.OnShutdown || p.Timeout() != d.Timeout() || p.ParallelShutdown != d.ParallelShutdown || p.Delay() != d.Delay() {
		t.Errorf("the shipped example %+v is not the defaults %+v", p, d)
	}
	if d.Timeout() != 300*time.Second || d.ParallelShutdown != 4 || d.OnBoot != OnBootAutostart || d.OnShutdown != OnShutdownShutdown {
		t.Errorf("defaults: %+v", d)
	}
}

func TestDecodePolicy(t *testing.T) {
	t.Parallel()
	head := "apiVersion: virtcon/v1\nkind: HostPolicy\n"
	ok := []struct {
		in    string
		check func(*Policy) bool
	}{
		{head, func(p *Policy) bool { return p.OnBoot == OnBootAutostart && p.Timeout() == DefaultShutdownTimeout }},
		{head + "onBoot: restore\nonShutdown: save\nshutdownTimeout: 90\nparallelShutdown: 2\nstartDelay: 5s\n", func(p *Policy) bool {
			return p.OnBoot == OnBootRestore && p.OnShutdown == OnShutdownSave && p.Timeout() == 90*time.Second && p.ParallelShutdown == 2 && p.Delay() == 5*time.Second
		}},
	}
	for _, tt := range ok {
		p, err := DecodePolicy([]byte(tt.in))
		if err != nil || !tt.check(p) {
			t.Errorf("DecodePolicy(%q) = %+v, %v", tt.in, p, err)
		}
	}
	bad := []struct{ in, want string }{
		{"", "empty"},
		{head + "onboot: restore\n", `onboot: unknown field (did you mean "onBoot"?)`},
		{head + "onBoot: always\n", `onBoot: must be autostart or restore (got "always")`},
		{head + "onShutdown: suspend\n", `onShutdown: must be shutdown, save or kill (got "suspend")`},
		{head + "shutdownTimeout: soon\n", `shutdownTimeout: "soon" is not a duration`},
		{head + "startDelay: 2d\n", `startDelay: "2d" is not a duration`},
		{head + "shutdownTimeout: 0\n", "shutdownTimeout: must be between 1s and 24h"},
		{head + "parallelShutdown: many\n", "parallelShutdown: must be an integer"},
		{head + "parallelShutdown: -1\n", "parallelShutdown: must be between 1 and 256"},
		{head + "parallelShutdown: 0\n", "parallelShutdown: must be between 1 and 256 (leave it out for the default, 4) (got 0)"},
		{head + "parallelShutdown: 257\n", "parallelShutdown: must be between 1 and 256"},
		{"apiVersion: virtcon/v2\nkind: HostPolicy\n", "apiVersion: want virtcon/v1"},
		{head + "---\n" + head, "more than one document"},
	}
	for _, tt := range bad {
		_, err := DecodePolicy([]byte(tt.in))
		if !errors.Is(err, ErrInvalidPolicy) || !errors.Is(err, fielderr.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodePolicy(%q) = %v; want ErrInvalidPolicy saying %q", tt.in, err, tt.want)
		}
	}
}

func TestLoadPolicy(t *testing.T) {
	t.Parallel()
	layout := paths.New(t.TempDir())
	if p, err := LoadPolicy(layout); err != nil || p.OnBoot != OnBootAutostart {
		t.Errorf("no host.yaml: %+v, %v; want the defaults", p, err)
	}
	if err := os.MkdirAll(layout.ConfigDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(PolicyFile(layout), []byte("apiVersion: virtcon/v1\nkind: HostPolicy\nonBoot: sometimes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPolicy(layout); err == nil || !strings.Contains(err.Error(), PolicyFile(layout)) {
		t.Errorf("a bad host.yaml: %v; want an error naming it", err)
	}
}
