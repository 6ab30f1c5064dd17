//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/virtcon/virtcon/internal/pamtest"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/vm"
	"github.com/virtcon/virtcon/webterm"
)

const chromiumPath = "/usr/bin/chromium"

// webRig is a running `virt webterm` on 127.0.0.1 with its own root, PAM
// service, admin group and users.
type webRig struct {
	root, service, group string
	admin, outsider      string
	password             string
	url                  string // https://127.0.0.1:PORT
	spki                 string // base64 SHA-256 of the certificate's public key
	fingerprint          string
	cmd                  *exec.Cmd
	log                  *testutil.Buffer
}

func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("%s missing (apt-get install chromium; scripts/install-deps.sh installs it): %v", chromiumPath, err)
	}
}

// startWebterm starts virt webterm on 127.0.0.1:0 and waits for its record.
func startWebterm(t *testing.T, extra ...string) *webRig {
	t.Helper()
	testutil.RequireRoot(t, needsRoot)
	pamtest.RequireRootPAM(t)
	r := &webRig{root: vmRoot(t), password: "Pw-" + randHex(t, 6), log: &testutil.Buffer{}}
	r.service = pamtest.InstallService(t)
	r.group = pamtest.CreateGroup(t)
	r.admin = pamtest.CreateUser(t, r.password, r.group)
	r.outsider = pamtest.CreateUser(t, r.password)
	args := append([]string{"--root", r.root, "webterm", "--listen", "127.0.0.1:0", "--dcui", dcuiBin,
		"--pam-service", r.service, "--admin-group", r.group}, extra...)
	r.cmd = exec.Command(virtBin, args...)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	r.cmd.Env = append(os.Environ(), "NO_COLOR=1")
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { r.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			r.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("virt webterm's log:\n%s", r.log.String())
		}
	})
	layout := paths.New(r.root)
	var rec *webterm.Record
	waitFor(t, 20*time.Second, func() bool {
		rec, _ = webterm.Read(layout)
		return rec != nil
	})
	port := rec.Listen[strings.LastIndexByte(rec.Listen, ':')+1:]
	r.url = "https://127.0.0.1:" + port
	r.fingerprint = rec.CertSHA256
	pemBytes, err := os.ReadFile(filepath.Join(layout.StateDir(), "webterm", webterm.SelfCertFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	r.spki = base64.StdEncoding.EncodeToString(sum[:])
	return r
}

// browser is one headless Chromium trusting the rig's certificate by its
// public key only (no certificate checks switched off).
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T, r *webRig) *browser {
	t.Helper()
	requireChromium(t)
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("ignore-certificate-errors-spki-list", r.spki),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1100, 760))
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	// the first Do starts the browser and binds it to its context's
	// lifetime: the long-lived one, not a call's with a timeout
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	b := &browser{t: t, ctx: ctx}
	b.run(chromedp.Navigate(r.url + "/"))
	return b
}

// tab opens a second tab of the same browser (the same cookies).
func (b *browser) tab(url string) *browser {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	b.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		b.t.Fatalf("chromium: new tab: %v", err)
	}
	nb := &browser{t: b.t, ctx: ctx}
	nb.run(chromedp.Navigate(url))
	return nb
}

func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v\nscreen:\n%s", err, b.screenNoFail())
	}
}

func (b *browser) eval(js string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	var out string
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var err error
		out, err = chromedp.Evaluate[string](js)(ctx, tg)
		return err
	}))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return out
}

// screenJS is xterm.js's buffer as text, one line per row.
const screenJS = `(() => { const t = window.__term; if (!t) return ''; const b = t.buffer.active; let s = ''; for (let i = 0; i < b.length; i++) s += b.getLine(i).translateToString(true) + '\n'; return s; })()`

func (b *browser) screenNoFail() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	var out string
	chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var err error
		out, err = chromedp.Evaluate[string](screenJS)(ctx, tg)
		return err
	}))
	return out
}

func (b *browser) screen() string { b.t.Helper(); return b.eval(screenJS) }

// waitScreen polls the terminal's buffer until every want is on it.
func (b *browser) waitScreen(timeout time.Duration, want ...string) string {
	b.t.Helper()
	return testutil.WaitForText(b.t, timeout, 100*time.Millisecond, b.screen, want...)
}

// keys types text into the terminal as key presses (keyDown with its
// text, then keyUp: chromedp's KeyEvent makes xterm.js see each twice).
func (b *browser) keys(text string) {
	b.t.Helper()
	b.run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, r := range text {
			code := "Key" + strings.ToUpper(string(r))
			vk := int64(unicode.ToUpper(r))
			for _, k := range []input.DispatchKeyEventParams{
				{Type: input.DispatchKeyEventTypeKeyDown, Key: string(r), Code: code, Text: string(r), UnmodifiedText: string(r), WindowsVirtualKeyCode: vk},
				{Type: input.DispatchKeyEventTypeKeyUp, Key: string(r), Code: code, WindowsVirtualKeyCode: vk},
			} {
				if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, k); err != nil {
					return err
				}
			}
		}
		return nil
	}))
}

// login fills the form and submits it.
func (b *browser) login(user, password string) {
	b.t.Helper()
	b.run(chromedp.WaitVisible(chromedp.CSS("#login")))
	b.eval(`(() => { for (const id of ['user', 'password']) document.getElementById(id).value = ''; document.getElementById('login-error').textContent = ''; return '' })()`)
	b.run(chromedp.SendKeys(chromedp.CSS("#user"), user), chromedp.SendKeys(chromedp.CSS("#password"), password),
		chromedp.Click(chromedp.CSS("#login-submit")))
}

// loginError waits for the form's error line and returns it.
func (b *browser) loginError() string {
	b.t.Helper()
	var msg string
	waitFor(b.t, 20*time.Second, func() bool {
		msg = b.eval(`document.getElementById('login-error').textContent`)
		return strings.TrimSpace(msg) != ""
	})
	return msg
}

// ptySize is the size of the terminal the rig's only session's DCUI runs
// on, as `stty size` says it ("ROWS COLS").
func ptySize(t *testing.T, r *webRig) string {
	t.Helper()
	pid := dcuiChild(t, r)
	tty, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", pid))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("stty", "-F", tty, "size").Output()
	if err != nil {
		t.Fatalf("stty -F %s size: %v", tty, err)
	}
	return strings.TrimSpace(string(out))
}

// dcuiChild is the PID of the one DCUI the rig's server runs.
func dcuiChild(t *testing.T, r *webRig) int {
	t.Helper()
	var pids []int
	waitFor(t, 10*time.Second, func() bool {
		pids = childrenOf(r.cmd.Process.Pid)
		return len(pids) == 1
	})
	return pids[0]
}

// childrenOf lists pid's child processes (from /proc/*/stat).
func childrenOf(pid int) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid, self int
		fmt.Sscanf(s[i+2:], "%s %d", &state, &ppid)
		fmt.Sscanf(s, "%d", &self)
		if ppid == pid && state != "Z" {
			out = append(out, self)
		}
	}
	return out
}

// A real browser against a real server with a real PAM user: the login
// form refuses a wrong password and a user outside the admin group; the
// admin's login shows the DCUI; from its VMs screen a test guest starts
// (virt vm list agrees); a smaller window reaches the DCUI's PTY.
func TestIntegrationWebtermBrowser(t *testing.T) {
	requireChromium(t)
	g := requireGuest(t)
	r := startWebterm(t)
	name := "web-" + randHex(t, 3)
	createGuest(t, r.root, name, g.initrd, false)
	t.Cleanup(func() { killUnder(r.root) })

	b := newBrowser(t, r)
	b.login(r.admin, "wrong-"+r.password)
	if msg := b.loginError(); !strings.Contains(msg, "Login incorrect") {
		t.Errorf("wrong password: the form says %q; want Login incorrect", msg)
	}
	// the right password of a user outside the admin group gets the wrong
	// password's answer (other words would confirm the password); the
	// audit log keeps the reason
	b.login(r.outsider, r.password)
	if msg := b.loginError(); !strings.Contains(msg, "Login incorrect") {
		t.Errorf("a user outside the admin group: the form says %q; want Login incorrect", msg)
	}
	audit, err := os.ReadFile(filepath.Join(paths.New(r.root).LogDir(), "auth.log"))
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	notAdmin := false
	for _, line := range strings.Split(string(audit), "\n") {
		notAdmin = notAdmin || strings.Contains(line, `"user":"`+r.outsider+`"`) && strings.Contains(line, `"result":"not-admin"`)
	}
	if !notAdmin {
		t.Errorf("the audit log has no not-admin line for %s:\n%s", r.outsider, audit)
	}

	b.login(r.admin, r.password)
	b.waitScreen(20*time.Second, r.admin, "[RW]", "web terminal https://127.0.0.1")
	if strings.Contains(b.screen(), r.password) {
		t.Error("the password is on the terminal")
	}
	// the password is in no process's argv or environment, no log
	for _, f := range append(mustGlob(t, "/proc/[0-9]*/cmdline"), mustGlob(t, "/proc/[0-9]*/environ")...) {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), r.password) {
			t.Errorf("the password is in %s", f)
		}
	}
	logs := r.log.String()
	filepath.WalkDir(paths.New(r.root).LogDir(), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			logs += string(b)
		}
		return nil
	})
	if strings.Contains(logs, r.password) || !strings.Contains(logs, r.admin) {
		t.Errorf("the logs hold the password (%v) or do not name the user (%v)", strings.Contains(logs, r.password), !strings.Contains(logs, r.admin))
	}
	if out := os.Getenv("VIRTCON_WEBTERM_SCREENSHOT"); out != "" {
		// docs/img/webterm.png: make the screenshot again with
		// VIRTCON_WEBTERM_SCREENSHOT=$PWD/docs/img/webterm.png
		waitFor(t, 30*time.Second, func() bool { return !strings.Contains(b.screen(), "loading") })
		var png []byte
		b.run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			var err error
			png, err = chromedp.CaptureScreenshot()(ctx, tg)
			return err
		}))
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	b.keys("v")
	b.waitScreen(10*time.Second, name, vm.PhaseStopped)
	b.keys("a")
	waitFor(t, 60*time.Second, func() bool { return entry(t, r.root, name).Phase == vm.PhaseRunning })
	b.waitScreen(15*time.Second, vm.PhaseRunning)

	// the window's size reaches the PTY
	before := ptySize(t, r)
	b.run(chromedp.EmulateViewport(640, 400))
	var after string
	waitFor(t, 10*time.Second, func() bool { after = ptySize(t, r); return after != before })
	rows, cols := 0, 0
	fmt.Sscanf(after, "%d %d", &rows, &cols)
	if want := b.eval(`String(window.__term.rows) + ' ' + String(window.__term.cols)`); after != want {
		t.Errorf("PTY size %q after the resize; want the terminal's %q", after, want)
	}
	if rows >= 40 || cols >= 120 {
		t.Errorf("PTY size %q after shrinking the window from %q", after, before)
	}
}

// sessionStatus is what GET /api/session answers the page's cookie.
func (b *browser) sessionStatus() string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	var out string
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var err error
		out, err = chromedp.Evaluate[string](`fetch('/api/session', {credentials: 'same-origin'}).then(r => String(r.status))`,
			chromedp.EvalAwaitPromise)(ctx, tg)
		return err
	}))
	if err != nil {
		b.t.Fatalf("browser: GET /api/session: %v", err)
	}
	return out
}

// Two browsers: the second session is read-only and names the first's
// holder; once the first logs out (the DCUI's x), the second takes over.
func TestIntegrationWebtermTwoSessions(t *testing.T) {
	requireChromium(t)
	r := startWebterm(t)
	first := newBrowser(t, r)
	first.login(r.admin, r.password)
	first.waitScreen(20*time.Second, "[RW]")
	second := newBrowser(t, r)
	second.login(r.admin, r.password)
	second.waitScreen(20*time.Second, "[RO]", "holds the console lock")
	if s := second.screen(); !strings.Contains(s, r.admin) || !strings.Contains(s, "web/") {
		t.Errorf("the read-only session does not name the holder (%s on web/…):\n%s", r.admin, s)
	}

	first.keys("x")
	first.run(chromedp.WaitVisible(chromedp.CSS("#login")))
	if st := first.sessionStatus(); st != "401" {
		t.Errorf("after the DCUI's logout GET /api/session says %s; want 401", st)
	}
	second.waitScreen(20*time.Second, "[RW]")
}

// The idle timeout ends the session: the browser is warned, then shown the
// login form, and the cookie no longer works.
func TestIntegrationWebtermIdle(t *testing.T) {
	requireChromium(t)
	r := startWebterm(t, "--idle-timeout", "4s")
	b := newBrowser(t, r)
	b.login(r.admin, r.password)
	b.waitScreen(20*time.Second, "[RW]")
	if st := b.sessionStatus(); st != "200" {
		t.Fatalf("logged in, GET /api/session says %s; want 200", st)
	}
	var banner string
	waitFor(t, 10*time.Second, func() bool {
		banner = b.eval(`(() => { const e = document.getElementById('banner'); return e.hidden ? '' : e.textContent })()`)
		return banner != ""
	})
	t.Logf("idle banner: %q", banner)
	b.run(chromedp.WaitVisible(chromedp.CSS("#login")))
	if st := b.sessionStatus(); st != "401" {
		t.Errorf("after the idle timeout GET /api/session says %s; want 401", st)
	}
	waitFor(t, 10*time.Second, func() bool { return len(childrenOf(r.cmd.Process.Pid)) == 0 })
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
