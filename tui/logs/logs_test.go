package logs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/keys"
	"github.com/virtcon/virtcon/tui/term"
	"github.com/virtcon/virtcon/tui/tuitest"
)

const areaW, areaH = 76, 17

const logDir = "/var/log/virtcon"

// fakeLogs is an in-memory log directory.
type fakeLogs struct {
	mu    sync.Mutex
	files []LogFile
	data  map[string]string
	reads []string
	delay time.Duration
}

func (f *fakeLogs) sources() Sources {
	return Sources{
		List: func(context.Context) ([]LogFile, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return append([]LogFile(nil), f.files...), nil
		},
		Read: func(ctx context.Context, path string, max int64) ([]byte, error) {
			f.mu.Lock()
			f.reads = append(f.reads, path)
			d, ok := f.data[path]
			delay := f.delay
			f.mu.Unlock()
			if delay > 0 {
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if !ok {
				return nil, fmt.Errorf("read log: open %s: no such file or directory", path)
			}
			if int64(len(d)) > max {
				d = d[int64(len(d))-max:]
			}
			return []byte(d), nil
		},
	}
}

func (f *fakeLogs) set(path, content string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data[path] = content
}

func dcuiLog() string {
	var b strings.Builder
	for i := 1; i <= 40; i++ {
		level := "INFO"
		msg := fmt.Sprintf("screen shown screen=status n=%d", i)
		switch {
		case i%13 == 0:
			level, msg = "ERROR", fmt.Sprintf("vms: action failed vm=web-0%d err=\"qemu exited\"", i%3)
		case i%7 == 0:
			level, msg = "WARN", "status: network err=\"netlink: operation not permitted\""
		}
		fmt.Fprintf(&b, "time=2026-03-14T09:%02d:00Z level=%s msg=%s\n", i, level, msg)
	}
	return b.String()
}

// serialLog is what a guest writes: colours, cursor moves, CRLF, UTF-8.
func serialLog() string {
	return "\x1b[2J\x1b[H\x1b[0;1;32mBdsDxe:\x1b[0m loading Boot0001 \"UEFI QEMU HARDDISK\"\r\n" +
		"[    0.000000] Linux version 6.1.0-18-amd64\r\n" +
		"[    1.234567] systemd[1]: Started \x1b[0;1;39mJournal Service\x1b[0m.\r\n" +
		"[  \x1b[0;32m  OK  \x1b[0m] Reached target \x1b[0;1;39mMulti-User System\x1b[0m.\r\n" +
		"Debian GNU/Linux 12 web-01 ttyS0\r\n\r\n" +
		"web-01 login: caf\u00e9 \u2014 \u4e16\u754c\r\n" +
		"\tindented\twith tabs\r\n" +
		"error: disk /dev/vdb not found\r\n"
}

func fakeDir() *fakeLogs {
	files := []LogFile{
		{Name: "auth.log", Path: logDir + "/auth.log", Size: 300},
		{Name: "dcui.log", Path: logDir + "/dcui.log", Size: 4000},
		{Name: "db-01", VM: "db-01", Path: logDir + "/vms/u3/serial.log", Size: 3 << 20},
		{Name: "web-01", VM: "web-01", Path: logDir + "/vms/u1/serial.log", Size: 500},
	}
	return &fakeLogs{files: files, data: map[string]string{
		logDir + "/auth.log":          `{"time":"2026-03-14T09:00:00Z","service":"virtcon","user":"alice","tty":"tty1","result":"success"}` + "\n",
		logDir + "/dcui.log":          dcuiLog(),
		logDir + "/vms/u3/serial.log": "",
		logDir + "/vms/u1/serial.log": serialLog(),
	}}
}

func newModel(t *testing.T, tier term.Tier, f *fakeLogs) *Model {
	t.Helper()
	c := common.New(context.Background(), tier, testutil.Logger(t))
	c.Session = &common.Session{User: "root", Writer: true}
	m := New(c, f.sources())
	m.SetSize(areaW, areaH)
	return m
}

// deliver sends msg and runs the commands it returns synchronously, as
// the program would, feeding their messages back.
func deliver(t *testing.T, m *Model, msg tea.Msg) {
	t.Helper()
	queue := []tea.Msg{msg}
	for len(queue) > 0 {
		msg, queue = queue[0], queue[1:]
		_, cmd := m.Update(msg)
		if cmd == nil {
			continue
		}
		switch out := cmd().(type) {
		case tea.BatchMsg:
			for _, c := range out {
				if c != nil {
					queue = append(queue, c())
				}
			}
		case nil:
		default:
			queue = append(queue, out)
		}
	}
}

func activated(t *testing.T, tier term.Tier, f *fakeLogs) *Model {
	t.Helper()
	m := newModel(t, tier, f)
	deliver(t, m, common.ActivateMsg{})
	if !m.listed || m.lines == nil {
		t.Fatalf("not loaded: listed %v, %d lines, err %v", m.listed, len(m.lines), m.readErr)
	}
	return m
}

func keysTo(t *testing.T, m *Model, ks ...string) {
	t.Helper()
	for _, k := range tuitest.Keys(ks...) {
		deliver(t, m, k)
	}
}

// typeText types s into the focused search box, one key per rune.
func typeText(t *testing.T, m *Model, s string) {
	t.Helper()
	for _, k := range tuitest.Type(s) {
		deliver(t, m, k)
	}
}

func screen(m *Model) string { return ansi.Strip(m.View().Content) }

func TestGolden(t *testing.T) {
	tests := []struct {
		name  string
		steps func(t *testing.T, m *Model)
		want  []string
	}{
		{"own log end", func(*testing.T, *Model) {}, []string{"> auth.log", "VM SERIAL", "2026-03-14 09:00:00 service=virtcon user=alice", "lines 1-1 of 1"}},
		{"dcui log bottom", func(t *testing.T, m *Model) { keysTo(t, m, "tab") }, []string{"> dcui.log", "of 40", "n=40"}},
		{"search", func(t *testing.T, m *Model) {
			keysTo(t, m, "tab", "home", "/")
			typeText(t, m, "error")
			keysTo(t, m, "enter", "o")
		}, []string{">time=2026-03-14T09:26:00Z level=ERROR", "match 2/3 for \"error\""}},
		{"search box", func(t *testing.T, m *Model) {
			keysTo(t, m, "tab", "/")
			typeText(t, m, "netl")
		}, []string{"/netl_", "enter search  esc cancel"}},
		{"serial", func(t *testing.T, m *Model) { keysTo(t, m, "shift+tab", "home") }, []string{"> web-01", "BdsDxe: loading Boot0001", "        indented"}},
		{"big file follow", func(t *testing.T, m *Model) { keysTo(t, m, "tab", "tab", "f") }, []string{"(last 1 MiB of 3.0 MiB)", "(empty)", "[FOLLOW]"}},
	}
	for _, tier := range tuitest.GoldenTiers {
		for _, tt := range tests {
			t.Run(tier.String()+"/"+tt.name, func(t *testing.T) {
				m := activated(t, tier, fakeDir())
				tt.steps(t, m)
				out := m.View().Content
				tuitest.RequireGolden(t, tier, out, areaW, areaH)
				for _, w := range tt.want {
					if !strings.Contains(ansi.Strip(out), w) {
						t.Errorf("screen lacks %q:\n%s", w, ansi.Strip(out))
					}
				}
			})
		}
	}
}

// TestJSONLinesReadable: virtcon's own JSON log lines (slog's JSON
// handler) show as time, level, message and key=values; other lines, and
// a guest's serial console, stay as written; search finds both what is
// shown and what is in the file.
func TestJSONLinesReadable(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			a.Value = slog.TimeValue(time.Date(2026, 3, 14, 9, 21, 14, 500, time.UTC))
		}
		return a
	}}))
	log.Info("login", "user", "alice", "tty", "tty1", "result", "ok")
	buf.WriteString("panic: not JSON {stays}\n")
	log.Warn("vms: action failed", "vm", "build", "err", `vm "build": start: qemu exited`)
	log.WithGroup("try").Info("network try started", "id", "t1", "links", []string{"br0"})
	f := fakeDir()
	f.data[logDir+"/dcui.log"] = buf.String()
	f.data[logDir+"/vms/u1/serial.log"] = `{"guest":"prints JSON","level":"INFO"}` + "\n"
	m := activated(t, term.Plain, f)
	keysTo(t, m, "tab", "home")
	got := strings.Join(m.lines, "\n") // the screen wraps them
	for _, w := range []string{
		"2026-03-14 09:21:14 INFO  login user=alice tty=tty1 result=ok",
		"panic: not JSON {stays}",
		`2026-03-14 09:21:14 WARN  vms: action failed vm=build err="vm \"build\":`,
		"2026-03-14 09:21:14 INFO  network try started try.id=t1 try.links=[\"br0\"]",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("screen lacks %q:\n%s", w, got)
		}
	}
	if scr := screen(m); strings.Contains(scr, `{"time"`) || !strings.Contains(scr, "INFO  login user=alice") {
		t.Errorf("a JSON line is shown raw:\n%s", scr)
	}
	for _, q := range []string{"user=alice", `"user":"alice"`, "action failed", `"level":"WARN"`} {
		keysTo(t, m, "/", "ctrl+u")
		typeText(t, m, q)
		keysTo(t, m, "enter")
		if len(m.matches) != 1 {
			t.Errorf("search %s: %d matches; want 1", q, len(m.matches))
		}
	}
	keysTo(t, m, "shift+tab", "shift+tab")
	if got := screen(m); !strings.Contains(got, `{"guest":"prints JSON","level":"INFO"}`) {
		t.Errorf("a guest's JSON line is not shown as written:\n%s", got)
	}
}

func TestFileSwitchAndCLI(t *testing.T) {
	m := activated(t, term.Plain, fakeDir())
	tests := []struct {
		keys []string
		want string
	}{
		{nil, "less /var/log/virtcon/auth.log"},
		{[]string{"tab"}, "less /var/log/virtcon/dcui.log"},
		{[]string{"f"}, "tail -f /var/log/virtcon/dcui.log"},
		{[]string{"tab"}, "virt vm logs -f db-01"},
		{[]string{"f"}, "virt vm logs db-01"},
		{[]string{"tab", "tab"}, "less /var/log/virtcon/auth.log"}, // wraps
		{[]string{"shift+tab"}, "virt vm logs web-01"},
	}
	for _, tt := range tests {
		keysTo(t, m, tt.keys...)
		if got := m.CLI(); got != tt.want {
			t.Errorf("after %v: CLI() = %q; want %q", tt.keys, got, tt.want)
		}
	}
	if !strings.Contains(screen(m), "Multi-User System") {
		t.Errorf("serial log not shown after switching:\n%s", screen(m))
	}
	empty := newModel(t, term.Plain, &fakeLogs{data: map[string]string{}})
	deliver(t, empty, common.ActivateMsg{})
	if got := empty.CLI(); got != "" {
		t.Errorf("no file: CLI() = %q; want \"\"", got)
	}
	if got := common.ShellQuote("/var/log/a b.log"); got != "'/var/log/a b.log'" {
		t.Errorf("shellQuote = %q", got)
	}
}

func TestScroll(t *testing.T) {
	m := activated(t, term.Plain, fakeDir())
	keysTo(t, m, "tab")
	if m.top != m.maxTop() || m.shown() != 40 || m.top == 0 {
		t.Fatalf("a file opens at its end: top %d (max %d), shown to %d of 40", m.top, m.maxTop(), m.shown())
	}
	if !strings.Contains(screen(m), "n=40") {
		t.Errorf("the last line is not on screen:\n%s", screen(m))
	}
	keysTo(t, m, "home")
	if m.top != 0 || !strings.Contains(screen(m), "lines 1-") {
		t.Errorf("home: top = %d", m.top)
	}
	keysTo(t, m, "j", "down")
	if m.top != 2 {
		t.Errorf("j down: top = %d; want 2", m.top)
	}
	keysTo(t, m, "home")
	next, cut := m.page()
	if cut {
		next-- // the half-shown line starts the next page
	}
	keysTo(t, m, "pgdown")
	if m.top != next || next < 2 {
		t.Errorf("pgdown: top = %d; want %d, the next page", m.top, next)
	}
	keysTo(t, m, "pgup")
	if m.top != 0 {
		t.Errorf("pgup: top = %d; want 0", m.top)
	}
	for range 20 {
		keysTo(t, m, "pgdown")
	}
	if m.top != m.maxTop() {
		t.Errorf("pgdown past the end: top = %d; want %d", m.top, m.maxTop())
	}
	keysTo(t, m, "k", "up", "end")
	if m.top != m.maxTop() {
		t.Errorf("end: top = %d; want %d", m.top, m.maxTop())
	}
}

func TestLongLinesWrap(t *testing.T) {
	f := fakeDir()
	long := "start " + strings.Repeat("0123456789", 20) + " finish"
	huge := strings.Repeat("y", 512<<10)
	f.set(logDir+"/auth.log", "first\n"+long+"\n"+huge+"\nlast\n")
	m := activated(t, term.Plain, f)
	keysTo(t, m, "home", "j")
	out := screen(m)
	if !strings.Contains(out, "| start") || !strings.Contains(out, "finish") {
		t.Errorf("a long line is not wrapped onto the next rows:\n%s", out)
	}
	tuitest.CheckSize(t, m.View().Content, areaW, areaH)
	keysTo(t, m, "end")
	if !strings.Contains(screen(m), "last") {
		t.Errorf("the line after a 1 MiB line is unreachable:\n%s", screen(m))
	}
}

func TestSearch(t *testing.T) {
	m := activated(t, term.Plain, fakeDir())
	keysTo(t, m, "tab", "home", "/")
	if !m.Capturing() {
		t.Fatal("Capturing() = false with the search box open")
	}
	// reserved letters go into the box, not to the app or the screen
	typeText(t, m, "qxwarn")
	keysTo(t, m, "backspace", "backspace", "backspace", "backspace", "backspace", "backspace")
	typeText(t, m, "WARN")
	keysTo(t, m, "enter")
	if m.Capturing() {
		t.Fatal("Capturing() = true after enter")
	}
	if len(m.matches) != 5 || m.cur != 0 || m.matches[0] != 6 {
		t.Fatalf("matches = %v, cur %d; want 5 matches from line 6", m.matches, m.cur)
	}
	if !strings.Contains(screen(m), `match 1/5 for "WARN"`) {
		t.Errorf("no match count:\n%s", screen(m))
	}
	keysTo(t, m, "o", "o")
	if m.cur != 2 {
		t.Errorf("cur = %d after o o; want 2", m.cur)
	}
	keysTo(t, m, "u", "u", "u")
	if m.cur != 4 {
		t.Errorf("cur = %d after u u u (wrapping); want 4", m.cur)
	}
	if line := m.matches[m.cur]; line < m.top || line >= m.top+m.textRows() {
		t.Errorf("current match line %d is off screen (top %d)", line, m.top)
	}
	for _, l := range strings.Split(screen(m), "\n") {
		if strings.Contains(l, "level=WARN") && !strings.Contains(l, "|>") {
			t.Errorf("matching line not marked with '>': %q", l)
		}
	}

	// esc in the box cancels and keeps the last search
	keysTo(t, m, "/")
	typeText(t, m, "zzz")
	keysTo(t, m, "esc")
	if m.query != "WARN" || len(m.matches) != 5 {
		t.Errorf("esc changed the search: %q, %d matches", m.query, len(m.matches))
	}
	// a search that finds nothing says so
	keysTo(t, m, "/", "backspace", "backspace", "backspace", "backspace")
	typeText(t, m, "kernel panic")
	keysTo(t, m, "enter")
	if !strings.Contains(screen(m), "[WARN] no match for kernel panic") {
		t.Errorf("no 'no match' message:\n%s", screen(m))
	}
	keysTo(t, m, "o")
	if !strings.Contains(screen(m), "no match for kernel panic") {
		t.Errorf("o without matches says nothing:\n%s", screen(m))
	}
	// esc outside the box clears the search
	keysTo(t, m, "esc")
	if m.query != "" || strings.Contains(screen(m), "no match") {
		t.Errorf("esc did not clear the search")
	}
	// paste goes into the box
	keysTo(t, m, "/")
	deliver(t, m, tea.PasteMsg{Content: "ERROR\n"})
	keysTo(t, m, "enter")
	if len(m.matches) != 3 {
		t.Errorf("pasted search found %d; want 3", len(m.matches))
	}
}

func TestFollow(t *testing.T) {
	f := fakeDir()
	m := activated(t, term.Plain, f)
	keysTo(t, m, "tab", "home", "f")
	if !m.follow || m.top != m.maxTop() {
		t.Fatalf("f: follow %v, top %d; want true, %d", m.follow, m.top, m.maxTop())
	}
	f.set(logDir+"/dcui.log", dcuiLog()+"time=2026-03-14T10:00:00Z level=INFO msg=\"appended line\"\n")
	deliver(t, m, common.TickMsg{})
	if !strings.Contains(screen(m), "appended lin") || m.top != m.maxTop() {
		t.Errorf("a tick while following did not show the new line at the bottom:\n%s", screen(m))
	}
	keysTo(t, m, "up")
	if m.follow {
		t.Errorf("scrolling up kept follow on")
	}
	n := len(f.reads)
	deliver(t, m, common.TickMsg{})
	if len(f.reads) != n {
		t.Errorf("a tick without follow read the file")
	}
}

func TestStaleReadIgnored(t *testing.T) {
	m := activated(t, term.Plain, fakeDir())
	_, cmd := m.Update(tuitest.Key("tab")) // dcui.log requested
	stale := cmd()
	// the operator moves on before it lands
	m.Update(stale)
	_, cmd = m.Update(tuitest.Key("tab"))
	m.Update(readMsg{path: logDir + "/dcui.log", lines: []string{"stale"}})
	if strings.Contains(screen(m), "stale") {
		t.Errorf("a late read of another file was shown")
	}
	deliver(t, m, cmd())
	if m.path != logDir+"/vms/u3/serial.log" {
		t.Errorf("path = %q", m.path)
	}
}

// TestKeypressDuringSlowRead: keys are answered at once while a read hangs.
func TestKeypressDuringSlowRead(t *testing.T) {
	f := fakeDir()
	m := activated(t, term.Rich, f)
	f.delay = 2 * time.Second
	_, cmd := m.Update(tuitest.Key("tab"))
	if cmd == nil {
		t.Fatal("tab returned no read")
	}
	go cmd()
	for _, k := range []string{"j", "k", "/", "x", "esc", "home", "tab", "f", "f"} {
		start := time.Now()
		m.Update(tuitest.Key(k))
		_ = m.View()
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Errorf("key %q took %v during a slow read", k, d)
		}
	}
}

func TestErrors(t *testing.T) {
	f := fakeDir()
	delete(f.data, logDir+"/auth.log")
	m := newModel(t, term.Plain, f)
	deliver(t, m, common.ActivateMsg{})
	if !strings.Contains(screen(m), "[FAIL] read log: open /var/log/virtcon/auth.log") {
		t.Errorf("read error not shown:\n%s", screen(m))
	}
	none := newModel(t, term.Plain, &fakeLogs{data: map[string]string{}})
	deliver(t, none, common.ActivateMsg{})
	if !strings.Contains(screen(none), "No log files yet") {
		t.Errorf("empty directory not explained:\n%s", screen(none))
	}
	bad := newModel(t, term.Plain, &fakeLogs{})
	bad.src.List = func(context.Context) ([]LogFile, error) {
		return nil, errors.New("list logs: open /var/log/virtcon: permission denied")
	}
	deliver(t, bad, common.ActivateMsg{})
	if !strings.Contains(screen(bad), "[FAIL]") || !strings.Contains(screen(bad), "permission") {
		t.Errorf("list error not shown:\n%s", screen(bad))
	}
}

func TestPlainIsASCII(t *testing.T) {
	m := activated(t, term.Plain, fakeDir())
	screens := map[string]string{}
	keysTo(t, m, "shift+tab", "home")
	screens["serial"] = m.View().Content
	keysTo(t, m, "/")
	typeText(t, m, "caf\u00e9")
	screens["search box"] = m.View().Content
	keysTo(t, m, "enter")
	screens["searched"] = m.View().Content
	for name, out := range screens {
		t.Run(name, func(t *testing.T) {
			tuitest.CheckSize(t, out, areaW, areaH)
			tuitest.RequireASCII(t, out)
		})
	}
	if !strings.Contains(ansi.Strip(screens["serial"]), "web-01 login: caf? ? ??") {
		t.Errorf("non-ASCII not replaced by '?':\n%s", ansi.Strip(screens["serial"]))
	}
	for _, col := range m.FullHelp() {
		for _, b := range col {
			tuitest.RequireASCII(t, b.Help().Key+b.Help().Desc)
		}
	}
}

func TestKeysAvoidReserved(t *testing.T) {
	m := newModel(t, term.Rich, fakeDir())
	for _, col := range m.FullHelp() {
		for _, b := range col {
			for _, k := range b.Keys() {
				if len(k) == 1 && strings.Contains(keys.Reserved, k) {
					t.Errorf("binding %q uses reserved key %q", b.Help().Desc, k)
				}
			}
		}
	}
}
