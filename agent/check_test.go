package agent

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/paths"
)

func findings(fs []Finding) map[string]Finding {
	m := map[string]Finding{}
	for _, f := range fs {
		m[f.ID] = f
	}
	return m
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name   string
		spoil  func(t *testing.T, l paths.Layout, ca *testCA)
		nb, na time.Duration // certificate validity around now
		want   map[string]string
	}{
		{name: "healthy", nb: -time.Hour, na: 29 * 24 * time.Hour, want: map[string]string{
			"agent.dir": FindingPass, "agent.identity.mode": FindingPass, "agent.ca.mode": FindingPass, "agent.config.mode": FindingPass,
			"agent.config": FindingPass, "agent.identity": FindingPass, "agent.ca": FindingPass, "agent.chain": FindingPass,
			"agent.pin": FindingPass, "agent.node": FindingPass, "agent.expiry": FindingPass}},
		{name: "key readable by others", nb: -time.Hour, na: time.Hour, want: map[string]string{"agent.identity.mode": FindingFail},
			spoil: func(t *testing.T, l paths.Layout, _ *testCA) { chmod(t, IdentityFile(l), 0o644) }},
		{name: "dir open", nb: -time.Hour, na: time.Hour, want: map[string]string{"agent.dir": FindingFail},
			spoil: func(t *testing.T, l paths.Layout, _ *testCA) { chmod(t, l.AgentDir(), 0o755) }},
		{name: "another CA", nb: -time.Hour, na: time.Hour, want: map[string]string{"agent.chain": FindingFail, "agent.pin": FindingFail},
			spoil: func(t *testing.T, l paths.Layout, _ *testCA) {
				write(t, CAFile(l), certPEM(newTestCA(t).root))
			}},
		{name: "another key", nb: -time.Hour, na: time.Hour, want: map[string]string{"agent.identity": FindingFail},
			spoil: func(t *testing.T, l paths.Layout, ca *testCA) {
				k, _ := enroll.NewKey()
				id, _ := loadIdentity(l)
				kp, _ := enroll.MarshalKey(k)
				write(t, IdentityFile(l), append(kp, certPEM(id.leaf, ca.inter)...))
			}},
		{name: "bad config", nb: -time.Hour, na: time.Hour, want: map[string]string{"agent.config": FindingFail},
			spoil: func(t *testing.T, l paths.Layout, _ *testCA) {
				write(t, ConfigFile(l), []byte("apiVersion: virtcon/v1\nkind: AgentConfig\ndirector: x\n"))
			}},
		{name: "expired", nb: -31 * 24 * time.Hour, na: -time.Hour, want: map[string]string{"agent.expiry": FindingFail}},
		{name: "past renewal window", nb: -28 * 24 * time.Hour, na: 2 * 24 * time.Hour, want: map[string]string{"agent.expiry": FindingWarn}},
		{name: "revoked", nb: -time.Hour, na: time.Hour, want: map[string]string{"agent.alert": FindingFail},
			spoil: func(t *testing.T, l paths.Layout, _ *testCA) {
				if err := writeAlert(l, &alert{Kind: AlertRevoked, At: now, Reason: "certificate revoked"}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "pending key left", nb: -time.Hour, na: time.Hour, want: map[string]string{"agent.pending-key": FindingWarn},
			spoil: func(t *testing.T, l paths.Layout, _ *testCA) {
				k, _ := enroll.NewKey()
				if err := writePendingKey(l, k); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := paths.New(t.TempDir())
			ca := newTestCA(t)
			enrolled(t, l, ca, now.Add(tt.nb), now.Add(tt.na))
			if tt.spoil != nil {
				tt.spoil(t, l, ca)
			}
			fs, err := configCheck(l, now)
			if err != nil {
				t.Fatal(err)
			}
			got := findings(fs)
			for id, want := range tt.want {
				if got[id].Status != want {
					t.Errorf("%s: %s (%s); want %s", id, got[id].Status, got[id].Detail, want)
				}
			}
			if tt.name == "healthy" {
				for _, f := range fs {
					if f.Status != FindingPass {
						t.Errorf("healthy: %s %s: %s", f.ID, f.Status, f.Detail)
					}
				}
			}
		})
	}
}

func TestConfigCheckNotEnrolled(t *testing.T) {
	t.Parallel()
	if _, err := ConfigCheck(paths.New(t.TempDir())); !errors.Is(err, ErrNotEnrolled) {
		t.Errorf("ConfigCheck without credentials: %v; want ErrNotEnrolled", err)
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
