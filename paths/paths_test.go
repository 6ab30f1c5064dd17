package paths

import "testing"

func TestLayout(t *testing.T) {
	l := New("/tmp/r")
	tests := []struct {
		name, got, want string
	}{
		{"ConfigDir", l.ConfigDir(), "/tmp/r/etc/virtcon"},
		{"StateDir", l.StateDir(), "/tmp/r/var/lib/virtcon"},
		{"RunDir", l.RunDir(), "/tmp/r/run/virtcon"},
		{"AgentDir", l.AgentDir(), "/tmp/r/etc/virtcon/agent"},
		{"AgentStateDir", l.AgentStateDir(), "/tmp/r/var/lib/virtcon/agent"},
		{"AgentRecordFile", l.AgentRecordFile(), "/tmp/r/run/virtcon/agent.json"},
		{"AgentLockFile", l.AgentLockFile(), "/tmp/r/run/virtcon/agent.lock"},
		{"root /", New("").AgentDir(), "/etc/virtcon/agent"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q; want %q", tt.name, tt.got, tt.want)
		}
	}
}
