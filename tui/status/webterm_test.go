package status

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/host"
	"github.com/virtcon/virtcon/internal/proc"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/webterm"
)

// fakeWebTerminal is a running web terminal's record for the screen tests.
func fakeWebTerminal() *webterm.Record {
	return &webterm.Record{Listen: "[::]:8443", PID: os.Getpid(),
		URLs:       []string{"https://192.168.10.5:8443/", "https://[2001:db8::5]:8443/", "https://esx-lab-01:8443/"},
		CertSHA256: "3A:5F:9C:01:7E:44:B2:D8:0C:61:AF:93:25:E8:7B:4D:10:C2:9E:58:F6:3B:A7:11:D4:82:6E:0F:B9:5A:C3:27"}
}

// hostRoot is a host tree whose kernel lists a socket listening on 8443
// (some process, not virtcon's web terminal).
func hostRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "proc", "net")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// 0.0.0.0:8443 and [::]:8443 in state 0A, TCP_LISTEN
	tcp := "  sl  local_address rem_address   st\n   0: 00000000:20FB 00000000:0000 0A 00000000:00000000\n"
	tcp6 := "  sl  local_address                         remote_address                        st\n" +
		"   0: 00000000000000000000000000000000:20FB 00000000000000000000000000000000:0000 0A 00000000:00000000\n"
	for name, data := range map[string]string{"tcp": tcp, "tcp6": tcp6} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func writeRecord(t *testing.T, layout paths.Layout, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(layout.WebtermRecordFile()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(layout.WebtermRecordFile(), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// goneProcess is the pid and start time of a process that has exited.
func goneProcess(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Skipf("needs sleep(1) to make a pid that is gone: %v", err)
	}
	st, err := proc.ReadStat(cmd.Process.Pid)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st.Start
}

func recordJSON(t *testing.T, w webterm.Record) string {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWebTerminalByRecordNotPort: the status screen shows the web
// terminal's URLs only from the web terminal's own runtime record
// (webterm.Write) naming a live process. Another process listening on
// 8443 shows none; neither does a stale record (its process gone, or its
// PID now another process's) or one that cannot be read.
func TestWebTerminalByRecordNotPort(t *testing.T) {
	live := *fakeWebTerminal()
	stale := live
	stale.PID, stale.PIDStart = goneProcess(t)
	self, err := proc.ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	reused := live // this process's PID, but started at another time
	reused.PIDStart = self.Start + 1
	tests := []struct {
		name    string
		record  string // "" for none, "write" for webterm.Write's
		urls    bool
		wantErr bool
		want    []string
	}{
		{"a process listens on 8443, no record", "", false, false, []string{"web terminal not running: use SSH or this console"}},
		{"record of a live web terminal", "write", true, false,
			[]string{"https://192.168.10.5:8443/", "https://[2001:db8::5]:8443/", "web terminal https://esx-lab-01:8443/  cert 3A:5F:9C:01:7E:44:B2:D8..."}},
		{"record of a process that is gone", recordJSON(t, stale), false, false, []string{"web terminal not running"}},
		{"record whose pid is another process now", recordJSON(t, reused), false, false, []string{"web terminal not running"}},
		{"record that is not JSON", "{half", false, true, []string{"web terminal not running"}},
		{"record without a pid", `{"urls":["https://192.168.10.5:8443/"]}`, false, true, []string{"web terminal not running"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			layout := paths.New(t.TempDir())
			switch tt.record {
			case "":
			case "write":
				if err := webterm.Write(layout, live); err != nil {
					t.Fatal(err)
				}
			default:
				writeRecord(t, layout, tt.record)
			}
			src := LiveSources(host.New(host.Options{Layout: layout, HostRoot: hostRoot(t), Logger: testutil.Logger(t)}))
			w, err := src.WebTerminal()
			if (err != nil) != tt.wantErr {
				t.Fatalf("WebTerminal() error = %v; want error %v", err, tt.wantErr)
			}
			if (w != nil) != tt.urls {
				t.Fatalf("WebTerminal() = %+v; want a record %v", w, tt.urls)
			}
			fake := fakeSources()
			fake.WebTerminal = src.WebTerminal
			m := newModel(t, term.Plain, fake)
			m.Update(m.loadNet()())
			text := ansi.Strip(m.Content(76, 40))
			if got := strings.Contains(text, "https://"); got != tt.urls {
				t.Errorf("URLs shown = %v; want %v:\n%s", got, tt.urls, text)
			}
			if strings.Contains(text, "8443") && !tt.urls {
				t.Errorf("the port is advertised without a web terminal:\n%s", text)
			}
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("screen lacks %q:\n%s", w, text)
				}
			}
		})
	}
}

func TestWebTerminalURLFor(t *testing.T) {
	w := fakeWebTerminal()
	w.URLs = append(w.URLs, "http://192.168.10.6:8443/", "not a url")
	tests := map[string]string{
		"192.168.10.5":        "https://192.168.10.5:8443/",
		"2001:db8::5":         "https://[2001:db8::5]:8443/",
		"::ffff:192.168.10.5": "https://192.168.10.5:8443/",
		"192.168.10.6":        "", // not https
		"10.0.0.1":            "",
	}
	for in, want := range tests {
		if got := webURLFor(w, netip.MustParseAddr(in)); got != want {
			t.Errorf("webURLFor(%s) = %q; want %q", in, got, want)
		}
	}
}
