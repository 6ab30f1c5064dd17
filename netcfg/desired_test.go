package netcfg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
)

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDesiredFile(t *testing.T) {
	layout := paths.New("/srv/host")
	if got, want := DesiredFile(layout), "/srv/host/etc/virtcon/network.yaml"; got != want {
		t.Errorf("DesiredFile = %s; want %s", got, want)
	}
	if got, want := DesiredPendingFile(layout), "/srv/host/etc/virtcon/network.yaml.pending"; got != want {
		t.Errorf("DesiredPendingFile = %s; want %s", got, want)
	}
}

func TestLoadDesired(t *testing.T) {
	const desired = "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: desired\n"
	const applied = "# Written by virtcon\napiVersion: virtcon/v1\nkind: HostNetwork\nhostname: applied\n"
	tests := []struct {
		name             string
		desired, applied string // "" = no file
		want             string // hostname; "" for the empty configuration
		wantErr          error
	}{
		{"desired file wins", desired, applied, "desired", nil},
		{"else the applied record", "", applied, "applied", nil},
		{"else empty", "", "", "", nil},
		{"a broken desired file is an error", "apiVersion: virtcon/v1\nkind: HostNetwork\nfrob: 1\n", applied, "", ErrInvalid},
		{"a damaged record is skipped", "", "garbage: [", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			if tc.desired != "" {
				writeTestFile(t, DesiredFile(layout), tc.desired)
			}
			if tc.applied != "" {
				writeTestFile(t, AppliedFile(layout), tc.applied)
			}
			cfg, err := LoadDesired(layout)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("LoadDesired = %v; want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.APIVersion != APIVersion || cfg.Kind != Kind || cfg.Hostname != tc.want {
				t.Errorf("LoadDesired = %+v; want hostname %q of a %s %s", cfg, tc.want, APIVersion, Kind)
			}
		})
	}
}

// ApplyDesired refuses before changing anything: an invalid configuration
// (through the same Decode as a file) and a deadline too short for a try.
// Neither writes a file.
func TestApplyDesiredRefuses(t *testing.T) {
	tests := []struct {
		name string
		cfg  *Config
		opts DesiredOptions
		want error
	}{
		{"nothing", nil, DesiredOptions{}, ErrInvalid},
		{"wrong kind", &Config{APIVersion: APIVersion, Kind: "Other"}, DesiredOptions{}, ErrInvalid},
		{"unknown field in the raw file", nil, DesiredOptions{Data: []byte("apiVersion: virtcon/v1\nkind: HostNetwork\nbridgez: []\n")}, ErrInvalid},
		{"try too short", &Config{APIVersion: APIVersion, Kind: Kind, Bridges: []Bridge{{Name: "vctestnone0"}}}, DesiredOptions{Try: time.Second}, ErrDeadlineTooShort},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			res, p, err := ApplyDesired(context.Background(), nil, layout, tc.cfg, tc.opts)
			if !errors.Is(err, tc.want) || res != nil || p != nil {
				t.Fatalf("ApplyDesired = %v, %v, %v; want an error wrapping %v", res, p, err, tc.want)
			}
			for _, f := range []string{DesiredFile(layout), DesiredPendingFile(layout), AppliedFile(layout), PendingPath(layout)} {
				if _, err := os.Stat(f); err == nil {
					t.Errorf("%s written by a refused apply", f)
				}
			}
		})
	}
}

func TestConfirmRollbackDesiredNothingPending(t *testing.T) {
	layout := paths.New(t.TempDir())
	writeTestFile(t, DesiredPendingFile(layout), "stale")
	if err := ConfirmDesired(context.Background(), layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("ConfirmDesired = %v; want ErrNoPendingTry", err)
	}
	if _, err := os.Stat(DesiredFile(layout)); err == nil {
		t.Error("a confirm with nothing pending made the stale pending file the desired one")
	}
	if err := RollbackDesired(context.Background(), layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("RollbackDesired = %v; want ErrNoPendingTry", err)
	}
}

// ConfirmDesired renames the pending file once Confirm succeeds; the record
// is one a try left (its watchdog long gone).
func TestConfirmDesiredMovesFile(t *testing.T) {
	layout := paths.New(t.TempDir())
	now := time.Now()
	if err := tryWrite(PendingPath(layout), &Pending{ID: "0123456789abcdef", Started: now, Deadline: now.Add(time.Minute), Snapshot: snapTestSnapshot()}); err != nil {
		t.Fatal(err)
	}
	const data = "# mine\napiVersion: virtcon/v1\nkind: HostNetwork\n"
	writeTestFile(t, DesiredPendingFile(layout), data)
	if err := ConfirmDesired(context.Background(), layout); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(DesiredFile(layout))
	if err != nil || string(got) != data {
		t.Errorf("desired file after confirm = %q, %v; want %q", got, err, data)
	}
	if _, err := PendingTry(layout); !errors.Is(err, ErrNoPendingTry) {
		t.Errorf("PendingTry after confirm = %v; want ErrNoPendingTry", err)
	}
}

func TestCloneIsDeep(t *testing.T) {
	c := testConfig()
	d := c.Clone()
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("Clone differs:\n%+v\n%+v", c, d)
	}
	d.Management.Addresses[0] = "x"
	d.Bridges[0].Ports[0] = "x"
	d.DNS.Servers[0] = "x"
	d.VLANs[0].Addresses[0] = "x"
	if !reflect.DeepEqual(c, testConfig()) {
		t.Errorf("editing the clone changed the original: %+v", c)
	}
	if (*Config)(nil).Clone() != nil {
		t.Error("Clone(nil) != nil")
	}
}

func TestAdmit(t *testing.T) {
	if got, err := Admit(testConfig(), testLive(), ValidateOptions{}); err != nil || !reflect.DeepEqual(got, testConfig()) {
		t.Errorf("Admit(valid) = %+v, %v; want the same configuration", got, err)
	}
	c := testConfig()
	c.Management.Gateway = "10.9.9.9"
	_, err := Admit(c, testLive(), ValidateOptions{})
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errs) != 1 || ve.Errs[0].Field != "management.gateway" {
		t.Errorf("Admit(gateway off-subnet) = %v; want one error on management.gateway", err)
	}
	if _, err := Admit(nil, nil, ValidateOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Admit(nil) = %v; want ErrInvalid", err)
	}
}

// LoadEffective is what the host is meant to have now: the tried file
// while its try is pending, else the desired file.
func TestLoadEffective(t *testing.T) {
	const desired = "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: desired\n"
	const tried = "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: tried\n"
	const applied = "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: applied\n"
	tests := []struct {
		name          string
		record        bool   // a try is pending
		sum           string // its DesiredSHA256
		pendingFile   string // "" = none
		applied, want string
	}{
		{"no try: the desired file", false, "", "", applied, "desired"},
		{"no try, stale tried file: the desired file", false, "", tried, applied, "desired"},
		{"a try: its file", true, desiredSum([]byte(tried)), tried, applied, "tried"},
		{"a try without a checksum: its file", true, "", tried, applied, "tried"},
		{"a try, another try's file: what it applied", true, desiredSum([]byte("other")), tried, applied, "applied"},
		{"a try without a file: what it applied", true, "", "", applied, "applied"},
		{"a try without a file or record: the desired file", true, "", "", "", "desired"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			writeTestFile(t, DesiredFile(layout), desired)
			if tc.applied != "" {
				writeTestFile(t, AppliedFile(layout), tc.applied)
			}
			if tc.pendingFile != "" {
				writeTestFile(t, DesiredPendingFile(layout), tc.pendingFile)
			}
			if tc.record {
				restoreTestRecord(t, layout, func(p *Pending) { p.DesiredSHA256 = tc.sum })
			}
			cfg, err := LoadEffective(layout)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Hostname != tc.want {
				t.Errorf("LoadEffective: hostname %q; want %q", cfg.Hostname, tc.want)
			}
		})
	}
	layout := paths.New(t.TempDir())
	writeTestFile(t, DesiredPendingFile(layout), "apiVersion: virtcon/v1\nkind: HostNetwork\nfrob: 1\n")
	restoreTestRecord(t, layout, nil)
	if _, err := LoadEffective(layout); !errors.Is(err, ErrInvalid) {
		t.Errorf("LoadEffective with a broken tried file = %v; want ErrInvalid", err)
	}
}

// LoadDesiredOrFallback never fails: a desired file that does not decode
// gives way to the applied record, else to an empty configuration, with
// a reason naming the error.
func TestLoadDesiredOrFallback(t *testing.T) {
	const broken = "apiVersion: virtcon/v1\nkind: HostNetwork\nfrob: 1\n"
	tests := []struct {
		name             string
		desired, applied string
		want             string   // hostname
		why              []string // substrings; nil: no reason
	}{
		{"desired file loads", "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: desired\n", "", "desired", nil},
		{"broken, applied record", broken, "apiVersion: virtcon/v1\nkind: HostNetwork\nhostname: applied\n", "applied",
			[]string{"network.yaml", "frob", "starting from the applied configuration"}},
		{"broken, no record", broken, "", "", []string{"network.yaml", "frob", "starting from an empty configuration"}},
		{"broken, damaged record", broken, "garbage: [", "", []string{"frob", "damaged", "starting from an empty configuration"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			writeTestFile(t, DesiredFile(layout), tc.desired)
			if tc.applied != "" {
				writeTestFile(t, AppliedFile(layout), tc.applied)
			}
			cfg, why := LoadDesiredOrFallback(layout)
			if cfg == nil || cfg.APIVersion != APIVersion || cfg.Kind != Kind || cfg.Hostname != tc.want {
				t.Errorf("LoadDesiredOrFallback = %+v; want hostname %q", cfg, tc.want)
			}
			if tc.why == nil && why != "" {
				t.Errorf("why = %q; want none", why)
			}
			for _, s := range tc.why {
				if !strings.Contains(why, s) {
					t.Errorf("why %q lacks %q", why, s)
				}
			}
		})
	}
}
