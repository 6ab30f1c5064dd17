package webterm

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/paths"
)

func testRecord() Record {
	return Record{Listen: "[::]:8443", URLs: []string{"https://192.168.10.5:8443/"}, CertSHA256: "3A:5F"}
}

// writeJSON puts r at the layout's record file as another process would.
func writeJSON(t *testing.T, layout paths.Layout, r any) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	writeRaw(t, layout, string(b))
}

func writeRaw(t *testing.T, layout paths.Layout, data string) {
	t.Helper()
	path := layout.WebtermRecordFile()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// process starts a process and returns its PID and start time; kill ends
// it (and reaps it) early, else the test's end does.
func process(t *testing.T) (pid int, start uint64, kill func()) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Skipf("needs sleep(1): %v", err)
	}
	done := false
	kill = func() {
		if !done {
			done = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(kill)
	st, err := proc.ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st.Start, kill
}

func TestWriteReadRemove(t *testing.T) {
	layout := paths.New(t.TempDir())
	in := testRecord()
	in.PID, in.PIDStart, in.BootID = 1, 1, "forged" // Write puts its own
	if err := Write(layout, in); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(layout.WebtermRecordFile())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v; want 0600", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(filepath.Dir(layout.WebtermRecordFile())); len(ents) != 1 {
		t.Errorf("run dir holds %d entries; want the record alone (no temp file left)", len(ents))
	}
	got, err := Read(layout)
	if err != nil || got == nil {
		t.Fatalf("Read = %+v, %v; want this process's record", got, err)
	}
	st, _ := proc.ReadStat(os.Getpid())
	if got.PID != os.Getpid() || got.PIDStart != st.Start || got.BootID != proc.BootID() || got.Listen != in.Listen || got.URLs[0] != in.URLs[0] {
		t.Errorf("Read = %+v; want %+v as pid %d, start %d", got, in, os.Getpid(), st.Start)
	}
	if err := Remove(layout); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layout.WebtermRecordFile()); !os.IsNotExist(err) {
		t.Errorf("record after Remove: %v; want it gone", err)
	}
	if err := Remove(layout); err != nil {
		t.Errorf("Remove without a record: %v; want nil", err)
	}
	if r, err := Read(layout); r != nil || err != nil {
		t.Errorf("Read without a record = %+v, %v; want nil, nil", r, err)
	}
}

// Remove on the way out of one web terminal leaves the record of another
// (one started since) alone.
func TestRemoveKeepsAnothersRecord(t *testing.T) {
	layout := paths.New(t.TempDir())
	pid, start, _ := process(t)
	other := testRecord()
	other.PID, other.PIDStart, other.BootID = pid, start, proc.BootID()
	writeJSON(t, layout, other)
	if err := Remove(layout); err != nil {
		t.Fatal(err)
	}
	if r, err := Read(layout); err != nil || r == nil || r.PID != pid {
		t.Errorf("Read after another process's Remove = %+v, %v; want pid %d's record kept", r, err, pid)
	}
}

// A record is the web terminal's only while its very process lives: the
// same PID started at the same time, in this boot.
func TestReadLiveness(t *testing.T) {
	boot := proc.BootID()
	if boot == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id")
	}
	pid, start, _ := process(t)
	gone, goneStart, kill := process(t)
	kill()
	tests := []struct {
		name    string
		pid     int
		start   uint64
		boot    string
		alive   bool
		wantErr bool
	}{
		{"alive", pid, start, boot, true, false},
		{"alive, boot not recorded", pid, start, "", true, false},
		{"exited", gone, goneStart, boot, false, false},
		// a PID the kernel gave to a later process: another start time
		{"pid reused", pid, start + 1, boot, false, false},
		{"earlier boot", pid, start, "0b5e55ed-0000-4000-8000-000000000000", false, false},
		{"no start time", pid, 0, boot, false, true},
		{"no pid", 0, start, boot, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			r := testRecord()
			r.PID, r.PIDStart, r.BootID = tt.pid, tt.start, tt.boot
			writeJSON(t, layout, r)
			got, err := Read(layout)
			if (err != nil) != tt.wantErr || (got != nil) != tt.alive {
				t.Errorf("Read = %+v, %v; want a record %t, an error %t", got, err, tt.alive, tt.wantErr)
			}
		})
	}
}

// A zombie (exited, not yet reaped by its parent) is gone too.
func TestReadZombie(t *testing.T) {
	layout := paths.New(t.TempDir())
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Skipf("needs sleep(1): %v", err)
	}
	defer func() { _ = cmd.Wait() }()
	st, err := proc.ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if cur, err := proc.ReadStat(cmd.Process.Pid); err == nil && cur.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed process did not become a zombie")
		}
	}
	r := testRecord()
	r.PID, r.PIDStart, r.BootID = cmd.Process.Pid, st.Start, proc.BootID()
	writeJSON(t, layout, r)
	if got, err := Read(layout); got != nil || err != nil {
		t.Errorf("Read of a zombie's record = %+v, %v; want nil, nil", got, err)
	}
}

func TestReadUnreadable(t *testing.T) {
	layout := paths.New(t.TempDir())
	writeRaw(t, layout, "{half")
	if r, err := Read(layout); r != nil || err == nil {
		t.Errorf("Read of a record that is not JSON = %+v, %v; want an error", r, err)
	}
	if err := Remove(layout); err == nil {
		t.Errorf("Remove of a record that is not JSON: nil; want an error (it cannot tell whose it is)")
	}
}
