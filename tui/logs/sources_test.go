package logs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		ascii bool
		want  []string
	}{
		{"empty", "", false, nil},
		{"plain lines", "a\nb\n", false, []string{"a", "b"}},
		{"crlf", "a\r\nb\r\n", false, []string{"a", "b"}},
		{"sgr", "\x1b[0;1;32mOK\x1b[0m done", false, []string{"OK done"}},
		{"cursor moves", "\x1b[2J\x1b[Hlogin:", false, []string{"login:"}},
		{"osc title", "\x1b]0;web-01\x07prompt$", false, []string{"prompt$"}},
		{"8-bit csi", "x\x9b31my", false, []string{"xy"}},
		{"c1 control as utf-8", "x\xc2\x9by", false, []string{"xy"}},
		{"controls", "a\x00b\x07c\x08d\x7fe", false, []string{"abcde"}},
		{"tabs", "\tx\tyy", false, []string{"        x       yy"}},
		{"invalid utf-8", "bad\xff\xfebytes", false, []string{"badbytes"}},
		{"unicode kept", "caf\u00e9 \u4e16", false, []string{"caf\u00e9 \u4e16"}},
		{"unicode ascii", "caf\u00e9 \u4e16", true, []string{"caf? ?"}},
		{"unterminated escape eats only its line", "one\x1b]0;never ends\ntwo", false, []string{"one", "two"}},
		{"blank lines kept", "a\n\nb", false, []string{"a", "", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Clean([]byte(tt.in), tt.ascii)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Clean(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestReadTail(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.log")
	if err := os.WriteFile(small, []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTail(context.Background(), small, MaxRead)
	if err != nil || string(got) != "one\ntwo\n" {
		t.Errorf("small file: %q, %v", got, err)
	}

	// 3 MiB of numbered lines: only the end comes back, from a whole line
	big := filepath.Join(dir, "big.log")
	var b bytes.Buffer
	for i := 0; b.Len() < 3<<20; i++ {
		b.WriteString(strings.Repeat("x", 50))
		b.WriteString(" line\n")
	}
	b.WriteString("the last line\n")
	if err := os.WriteFile(big, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = ReadTail(context.Background(), big, MaxRead)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > MaxRead || len(got) < MaxRead-100 {
		t.Errorf("read %d bytes of a 3 MiB file; want just under %d", len(got), MaxRead)
	}
	if !bytes.HasPrefix(got, []byte(strings.Repeat("x", 50)+" line\n")) {
		t.Errorf("tail does not start at a whole line: %q", got[:60])
	}
	if !bytes.HasSuffix(got, []byte("the last line\n")) {
		t.Errorf("tail does not end with the file's end")
	}

	if _, err := ReadTail(context.Background(), filepath.Join(dir, "missing.log"), MaxRead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v; want ErrNotExist", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadTail(ctx, small, MaxRead); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}

	// a FIFO with no writer would block a plain open forever
	fifo := filepath.Join(dir, "trap.log")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadTail(context.Background(), fifo, MaxRead)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO: err = %v; want not a regular file", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("ReadTail blocked on a FIFO")
	}
}

// listVMs is the manager's serial-log paths with a list of its own.
type listVMs struct {
	*vm.Manager
	list func(context.Context) ([]vm.Entry, error)
}

func (v listVMs) List(ctx context.Context) ([]vm.Entry, error) { return v.list(ctx) }

func TestLiveSourcesList(t *testing.T) {
	layout := paths.New(t.TempDir())
	dir := layout.LogDir()
	const uidWeb = "3f2a9c01-8b7d-4e1a-9c3b-2d5e6f7a8b9c"
	const uidGone = "3f2a9c02-8b7d-4e1a-9c3b-2d5e6f7a8b9c"
	const uidNoLog = "3f2a9c03-8b7d-4e1a-9c3b-2d5e6f7a8b9c"
	mgr := vm.NewManager(vm.Options{Layout: layout})
	files := map[string]string{
		filepath.Join(dir, "dcui.log"):           "d\n",
		filepath.Join(dir, "auth.log"):           "a\n",
		filepath.Join(dir, "notes.txt"):          "not a log\n",
		mgr.SerialLogPath(uidWeb):                "serial\n",
		mgr.SerialLogPath(uidGone):               "old\n",
		filepath.Join(dir, "vms", uidNoLog, "x"): "",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "old.log"), 0o755); err != nil { // a directory named like a log
		t.Fatal(err)
	}
	vms := listVMs{Manager: mgr, list: func(context.Context) ([]vm.Entry, error) {
		return []vm.Entry{{Name: "web-01", UID: uidWeb}}, errors.New("a broken spec elsewhere")
	}}
	got, err := LiveSources(layout, vms).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []LogFile{
		{Name: "auth.log", Path: filepath.Join(dir, "auth.log"), Size: 2},
		{Name: "dcui.log", Path: filepath.Join(dir, "dcui.log"), Size: 2},
		{Name: uidGone, VM: uidGone, Path: mgr.SerialLogPath(uidGone), Size: 4},
		{Name: "web-01", VM: "web-01", Path: mgr.SerialLogPath(uidWeb), Size: 7},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List =\n%+v\nwant\n%+v", got, want)
	}

	none, err := LiveSources(paths.New(t.TempDir()), nil).List(context.Background())
	if err != nil || len(none) != 0 {
		t.Errorf("no log dir: %v, %v; want nothing, no error", none, err)
	}
}

func TestReadable(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"slog JSON", `{"time":"2026-03-14T09:21:14.123456789+01:00","level":"INFO","msg":"login","user":"alice","tty":"tty1","result":"ok"}`,
			"2026-03-14 09:21:14 INFO  login user=alice tty=tty1 result=ok", true},
		{"warn with quoted values", `{"time":"2026-03-14T09:22:40Z","level":"WARN","msg":"vms: action failed","vm":"build","err":"vm \"build\": start: qemu exited"}`,
			`2026-03-14 09:22:40 WARN  vms: action failed vm=build err="vm \"build\": start: qemu exited"`, true},
		{"error level, numbers, bools, null, arrays", `{"time":"2026-03-14T09:22:40Z","level":"ERROR","msg":"x","pid":812,"ok":false,"n":null,"links":["br0","eno1"],"f":1.5}`,
			`2026-03-14 09:22:40 ERROR x pid=812 ok=false n=null links=["br0","eno1"] f=1.5`, true},
		{"groups flattened", `{"level":"INFO","msg":"try","net":{"id":"t1","deadline":{"s":60}},"empty":{}}`,
			"INFO  try net.id=t1 net.deadline.s=60 empty={}", true},
		{"audit record: no level, no msg", `{"time":"2026-03-14T09:21:14Z","service":"virtcon","user":"alice","tty":"tty1","result":"success"}`,
			"2026-03-14 09:21:14 service=virtcon user=alice tty=tty1 result=success", true},
		{"time that is not RFC 3339 kept", `{"time":"yesterday","msg":"m"}`, "yesterday m", true},
		{"empty string and spaces quoted", `{"msg":"m","a":"","b":"two words","c":"k=v"}`, `m a="" b="two words" c="k=v"`, true},
		{"escape sequence in a value quoted", `{"msg":"m","name":"evil\u001b[31m"}`, `m name="evil\x1b[31m"`, true},
		{"text line", `time=2026-03-14T09:21:14Z level=INFO msg=login`, "", false},
		{"guest output", "[    0.000000] Linux version 6.1.0", "", false},
		{"not an object", `["a","b"]`, "", false},
		{"broken JSON", `{"msg":"cut`, "", false},
		{"two objects", `{"a":1} {"b":2}`, "", false},
		{"empty object", `{}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Readable(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Readable(%s) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}
