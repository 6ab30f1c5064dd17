package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/paths"
)

func writeRecord(t *testing.T, l paths.Layout, r record) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(l.AgentRecordFile()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.AgentRecordFile(), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func selfRecord(t *testing.T, state string) record {
	t.Helper()
	st, err := proc.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return record{PID: os.Getpid(), PIDStart: st.Start, BootID: proc.BootID(), State: state, Director: "127.0.0.1:9443", NodeID: testNodeID}
}

func TestReadStatus(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	now := time.Now()
	notAfter := now.Add(30 * 24 * time.Hour).Truncate(time.Second)
	ack := now.Add(-3 * time.Second).UTC().Truncate(time.Second)
	at := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
	tests := []struct {
		name        string
		enrolled    bool
		rec         *record
		alert       *alert
		wantRunning bool
		wantState   string
		wantLine    string
	}{
		{name: "nothing", wantLine: "Director: not enrolled"},
		{name: "enrolled, never run", enrolled: true, wantState: StateStopped,
			wantLine: "Director: enrolled with 127.0.0.1:9443 · node 0f1e2d3c… · agent not running"},
		{name: "connected", enrolled: true, rec: &record{State: StateConnected, LastHeartbeatAck: ack}, wantRunning: true, wantState: StateConnected,
			wantLine: "Director: connected to 127.0.0.1:9443 · node 0f1e2d3c… · cert until " + notAfter.Local().Format(time.DateOnly)},
		{name: "backoff", enrolled: true, rec: &record{State: StateBackoff, LastError: "dial tcp: connection refused"}, wantRunning: true, wantState: StateBackoff,
			wantLine: "Director: not connected to 127.0.0.1:9443 (backoff): dial tcp: connection refused"},
		{name: "stale record", enrolled: true, rec: &record{PID: 4194304, PIDStart: 1, State: StateConnected, LastHeartbeatAck: ack}, wantState: StateStopped,
			wantLine: "agent not running"},
		{name: "revoked", enrolled: true, alert: &alert{Kind: AlertRevoked, At: at, Reason: "certificate revoked"}, wantState: StateRevoked,
			wantLine: "Director: REVOKED at " + at.Local().Format("2006-01-02 15:04") + ": VMs untouched; re-enrol"},
		{name: "expired", enrolled: true, alert: &alert{Kind: AlertExpired, At: at}, wantState: StateExpired,
			wantLine: "Director: certificate EXPIRED at " + at.Local().Format("2006-01-02 15:04") + ": VMs untouched; re-enrol"},
		{name: "record without enrolment", rec: &record{State: StateConnected}, wantLine: "Director: not enrolled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := paths.New(t.TempDir())
			if tt.enrolled {
				enrolled(t, l, ca, now.Add(-5*time.Minute), notAfter)
			}
			if tt.rec != nil {
				r := selfRecord(t, tt.rec.State)
				r.LastHeartbeatAck, r.LastError = tt.rec.LastHeartbeatAck, tt.rec.LastError
				if tt.rec.PID != 0 {
					r.PID, r.PIDStart = tt.rec.PID, tt.rec.PIDStart
				}
				writeRecord(t, l, r)
			}
			if tt.alert != nil {
				if err := writeAlert(l, tt.alert); err != nil {
					t.Fatal(err)
				}
			}
			s, err := ReadStatus(l)
			if err != nil {
				t.Fatalf("ReadStatus: %v", err)
			}
			if s.Enrolled != tt.enrolled || s.Running != tt.wantRunning || s.State != tt.wantState {
				t.Errorf("enrolled %v running %v state %q; want %v %v %q", s.Enrolled, s.Running, s.State, tt.enrolled, tt.wantRunning, tt.wantState)
			}
			if line := s.Line(); !strings.Contains(line, tt.wantLine) {
				t.Errorf("Line() = %q; want it to contain %q", line, tt.wantLine)
			}
			if tt.enrolled {
				if s.NodeID != testNodeID || s.Director != "127.0.0.1:9443" || !s.CertNotAfter.Equal(notAfter) || s.Pin == "" {
					t.Errorf("status %+v: want node %s, director 127.0.0.1:9443, cert until %v, a pin", s, testNodeID, notAfter)
				}
			}
			if tt.rec != nil && tt.enrolled && !s.LastHeartbeatAck.Equal(tt.rec.LastHeartbeatAck) {
				t.Errorf("last heartbeat ack %v; want %v (a stale record's too)", s.LastHeartbeatAck, tt.rec.LastHeartbeatAck)
			}
		})
	}
}

// A credential file that is there but cannot be read fails closed.
func TestReadStatusUnreadable(t *testing.T) {
	t.Parallel()
	l := paths.New(t.TempDir())
	enrolled(t, l, newTestCA(t), time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err := os.WriteFile(ConfigFile(l), []byte("apiVersion: virtcon/v1\nkind: AgentConfig\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadStatus(l); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("ReadStatus with a broken agent.yaml = %+v, %v; want an error naming the field", s, err)
	}
}

// The JSON names are the documented, stable ones; unknown values are
// left out, never zero.
func TestStatusJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(&Status{})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"enrolled":false,"running":false}` {
		t.Errorf("not enrolled: %s", b)
	}
	s := Status{Enrolled: true, Director: "d:1", NodeID: testNodeID, Pin: goodPin, CertNotAfter: time.Unix(1e9, 0).UTC(), Running: true, PID: 7,
		State: StateConnected, LastHeartbeatAck: time.Unix(1e9, 0).UTC()}
	b, _ = json.Marshal(&s)
	for _, k := range []string{`"enrolled":true`, `"director":"d:1"`, `"nodeID":"` + testNodeID, `"pin":"sha256:`, `"certNotAfter":"2001-09-09T01:46:40Z"`,
		`"running":true`, `"pid":7`, `"state":"connected"`, `"lastHeartbeatAck":"2001-09-09T01:46:40Z"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("status JSON %s lacks %s", b, k)
		}
	}
}
