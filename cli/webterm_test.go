package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/webterm"
)

// lockedBuffer is a stream the server writes to from its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWebtermServesAndStatus runs virt webterm on 127.0.0.1 under a temp
// root: it makes its certificate, serves HTTPS with it, keeps its record
// (virt webterm status shows it), and removes the record when its ctx
// ends; then status says none runs, with exit status 1.
func TestWebtermServesAndStatus(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: virt webterm refuses to run otherwise")
	}
	t.Setenv("VIRTCON_HOST_ROOT", "")
	root := t.TempDir()
	layout := paths.New(root)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--root", root, "webterm", "--listen", "127.0.0.1:0", "--dcui", "/bin/true", "--allow-host", "console.example"},
			&IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &errOut})
	}()
	var rec *webterm.Record
	for deadline := time.Now().Add(20 * time.Second); rec == nil; time.Sleep(20 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("virt webterm exited %d: %s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no web terminal record after 20 s: %s", errOut.String())
		}
		r, err := webterm.Read(layout)
		if err != nil {
			t.Fatal(err)
		}
		rec = r
	}
	if len(rec.URLs) != 1 || rec.URLs[0] != "https://"+rec.Listen+"/" {
		t.Errorf("record URLs %q; want the listener's https://%s/", rec.URLs, rec.Listen)
	}
	for _, want := range []string{"virt webterm: serving https://" + rec.Listen + "/", "certificate SHA-256 " + rec.CertSHA256, "web terminal listening"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}

	// HTTPS with the certificate the record names
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	resp, err := client.Get("https://" + rec.Listen + "/api/session")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("GET /api/session: %s, CSP %q; want 401 with the security headers", resp.Status, resp.Header.Get("Content-Security-Policy"))
	}
	sum := sha256.Sum256(resp.TLS.PeerCertificates[0].Raw)
	var hexs []string
	for _, b := range sum {
		hexs = append(hexs, fmt.Sprintf("%02X", b))
	}
	if got := strings.Join(hexs, ":"); got != rec.CertSHA256 {
		t.Errorf("served certificate %s; the record says %s", got, rec.CertSHA256)
	}
	if _, err := os.Stat(filepath.Join(layout.StateDir(), "webterm")); err != nil {
		t.Errorf("self-signed certificate's directory: %v", err)
	}

	out, stderr, code := run(t, "--root", root, "webterm", "status", "-o", "json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	var st webtermStatus
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("status JSON %q: %v", out, err)
	}
	if st.Listen != rec.Listen || st.CertSHA256 != rec.CertSHA256 || st.PID != os.Getpid() || st.Sessions == nil || len(st.Sessions) != 0 {
		t.Errorf("status %+v; want the record's listen, fingerprint and pid, no sessions ([])", st)
	}
	out, _, code = run(t, "--root", root, "webterm", "status")
	if code != 0 || !strings.Contains(out, "FINGERPRINT") || !strings.Contains(out, rec.CertSHA256) || !strings.Contains(out, "SESSIONS     0") {
		t.Errorf("status table (exit %d):\n%s", code, out)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("virt webterm exited %d after SIGTERM's ctx; want 0: %s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("virt webterm still running 15 s after its ctx ended")
	}
	if _, err := os.Stat(layout.WebtermRecordFile()); !os.IsNotExist(err) {
		t.Errorf("record after exit: %v; want removed", err)
	}
	_, stderr, code = run(t, "--root", root, "webterm", "status")
	if code != ExitError || !strings.Contains(stderr, "no web terminal is running") {
		t.Errorf("status with none running: exit %d, %q; want 1 saying none runs", code, stderr)
	}
}

// TestWebtermStatusStaleRecord: a record whose process is gone is none.
func TestWebtermStatusStaleRecord(t *testing.T) {
	root := t.TempDir()
	layout := paths.New(root)
	path := layout.WebtermRecordFile()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	// pid 1's start time is not 1 tick after boot... unless it is: take
	// a pid that cannot exist
	if err := os.WriteFile(path, []byte(`{"listen":"[::]:8443","urls":[],"certSha256":"AA","pid":4194304,"pidStart":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "--root", root, "webterm", "status", "-o", "json")
	if code != ExitError || !strings.Contains(stderr, "no web terminal is running") {
		t.Errorf("status with a stale record: exit %d, %q; want 1 saying none runs", code, stderr)
	}
}

func TestWebtermRefusals(t *testing.T) {
	t.Setenv("VIRTCON_HOST_ROOT", "")
	root := t.TempDir()
	notExec := filepath.Join(root, "dcui")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		euid int
		code int
		want string
	}{
		{"bad listen", []string{"--listen", "8443"}, 0, ExitUsage, "--listen"},
		{"allow-host with a scheme", []string{"--allow-host", "https://x.example"}, 0, ExitUsage, "--allow-host"},
		{"allow-host with a port", []string{"--allow-host", "x.example:8443"}, 0, ExitUsage, "without a port"},
		{"no sessions", []string{"--max-sessions", "0"}, 0, ExitUsage, "--max-sessions 0"},
		{"idle too short", []string{"--idle-timeout", "1"}, 0, ExitUsage, "--idle-timeout 1s"},
		{"PAM service a path", []string{"--pam-service", "../shadow"}, 0, ExitUsage, "--pam-service"},
		{"no admin group", []string{"--admin-group", ""}, 0, ExitUsage, "--admin-group"},
		{"dcui missing", []string{"--dcui", filepath.Join(root, "nope")}, 0, ExitUsage, "no such file"},
		{"dcui not executable", []string{"--dcui", notExec}, 0, ExitUsage, "not an executable"},
		{"not root", []string{"--dcui", "/bin/true"}, 1000, ExitNotPermitted, "needs root"},
		{"extra argument", []string{"now"}, 0, ExitUsage, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := webtermEUID
			webtermEUID = func() int { return tt.euid }
			t.Cleanup(func() { webtermEUID = old })
			_, stderr, code := run(t, append([]string{"--root", root, "webterm", "--listen", "127.0.0.1:0"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, %q; want %d saying %q", code, stderr, tt.code, tt.want)
			}
		})
	}
	if _, err := os.Stat(paths.New(root).WebtermRecordFile()); !os.IsNotExist(err) {
		t.Errorf("a refused start left a record: %v", err)
	}
}

func TestWebtermURLs(t *testing.T) {
	sans := []string{"esx-01", "esx-01.lab.example", "localhost", "127.0.0.1", "192.168.10.5", "::1", "2001:db8::5"}
	tests := []struct {
		bound string
		want  []string
	}{
		{"[::]:8443", []string{"https://192.168.10.5:8443/", "https://[2001:db8::5]:8443/", "https://esx-01:8443/", "https://esx-01.lab.example:8443/"}},
		{"0.0.0.0:443", []string{"https://192.168.10.5/", "https://[2001:db8::5]/", "https://esx-01/", "https://esx-01.lab.example/"}},
		{"192.168.10.5:8443", []string{"https://192.168.10.5:8443/"}},
		{"127.0.0.1:9443", []string{"https://127.0.0.1:9443/"}},
	}
	for _, tt := range tests {
		got := webtermURLs(tt.bound, sans)
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("webtermURLs(%s) = %q; want %q", tt.bound, got, tt.want)
		}
	}
}

type certSink struct {
	mu  sync.Mutex
	got []tls.Certificate
}

func (c *certSink) SetCertificate(cert tls.Certificate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, cert)
}

func (c *certSink) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// A running web terminal checks its certificate on a timer: the same one
// changes nothing; a renewed one is served and recorded, once.
func TestWebtermRenewCert(t *testing.T) {
	old := webtermRenewEvery
	webtermRenewEvery = 5 * time.Millisecond
	t.Cleanup(func() { webtermRenewEvery = old })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	checks, records := 0, []string{}
	sink := &certSink{}
	renewed := tls.Certificate{Certificate: [][]byte{[]byte("renewed")}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		renewCert(ctx, slog.New(slog.DiscardHandler), sink, "AA:AA", func(context.Context) (*webterm.Cert, error) {
			mu.Lock()
			defer mu.Unlock()
			checks++
			switch {
			case checks < 3:
				return &webterm.Cert{SHA256: "AA:AA"}, nil
			case checks == 3:
				return nil, errors.New("disk on fire")
			}
			return &webterm.Cert{SHA256: "BB:BB", TLS: renewed}, nil
		}, func(c *webterm.Cert) error {
			mu.Lock()
			defer mu.Unlock()
			records = append(records, c.SHA256)
			return nil
		})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := checks
		mu.Unlock()
		if n >= 8 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if sink.count() != 1 || string(sink.got[0].Certificate[0]) != "renewed" {
		t.Errorf("certificates served: %d; want the renewed one, once", sink.count())
	}
	if len(records) != 1 || records[0] != "BB:BB" {
		t.Errorf("records written: %v; want the renewed fingerprint once", records)
	}
}
