//go:build integration

package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/virtcon/virtcon/internal/pamtest"
	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/vm"
)

// tmuxTerm is a real terminal: a detached tmux session on a private server
// socket, 80x24, running one command.
type tmuxTerm struct {
	t      *testing.T
	socket string
	name   string
}

func requireTmux(t *testing.T) {
	t.Helper()
	testutil.RequireCommand(t, "tmux", "apt-get install tmux; the DCUI tests drive a real terminal")
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// startTerm runs argv in a new 80x24 tmux window with TERM=termEnv.
func startTerm(t *testing.T, termEnv string, argv ...string) *tmuxTerm {
	t.Helper()
	requireTmux(t)
	tt := &tmuxTerm{t: t, socket: "vcit-" + randHex(t, 4), name: "dcui"}
	args := []string{"-L", tt.socket, "-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "24", "-s", tt.name,
		"env", "TERM=" + termEnv, "NO_COLOR="}
	args = append(args, argv...)
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	// keep the pane when the program exits, so a crash stays visible
	exec.Command("tmux", "-L", tt.socket, "set-option", "-t", tt.name, "remain-on-exit", "on").Run()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last screen:\n%s", tt.capture())
		}
		exec.Command("tmux", "-L", tt.socket, "kill-server").Run()
	})
	return tt
}

func (tt *tmuxTerm) capture() string {
	out, err := exec.Command("tmux", "-L", tt.socket, "capture-pane", "-p", "-t", tt.name).Output()
	if err != nil {
		return fmt.Sprintf("(capture-pane: %v)", err)
	}
	return string(out)
}

// waitFor polls the screen until every want is on it.
func (tt *tmuxTerm) waitFor(timeout time.Duration, want ...string) string {
	tt.t.Helper()
	return testutil.WaitForText(tt.t, timeout, 100*time.Millisecond, tt.capture, want...)
}

// keys sends tmux key names (Enter, Tab, F4, Escape) or, with literal,
// text typed as is.
func (tt *tmuxTerm) keys(literal bool, ks ...string) {
	tt.t.Helper()
	args := []string{"-L", tt.socket, "send-keys", "-t", tt.name}
	if literal {
		args = append(args, "-l")
	}
	if out, err := exec.Command("tmux", append(args, ks...)...).CombinedOutput(); err != nil {
		tt.t.Fatalf("tmux send-keys %v: %v: %s", ks, err, out)
	}
}

func (tt *tmuxTerm) login(user, password string) {
	tt.t.Helper()
	tt.keys(true, "l")
	tt.waitFor(5*time.Second, "Password")
	tt.keys(true, user)
	tt.keys(false, "Tab")
	tt.keys(true, password)
	tt.keys(false, "Enter")
}

// cliLine is the screen's "CLI:" line.
func cliLine(screen string) string {
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, "CLI:") {
			return l
		}
	}
	return ""
}

// cancelLogin leaves the login form with Esc and waits until the status
// screen is back (a key sent right after Esc would read as Alt+key).
func (tt *tmuxTerm) cancelLogin() {
	tt.t.Helper()
	tt.keys(false, "Escape")
	tt.waitFor(5*time.Second, "F2/l log in")
}

// dcuiRig is a DCUI under test with its PAM service, admin group and users.
type dcuiRig struct {
	root, service, group string
	admin, outsider      string
	password             string
}

func newDCUIRig(t *testing.T) *dcuiRig {
	t.Helper()
	testutil.RequireRoot(t, needsRoot)
	requireTmux(t)
	pamtest.RequireRootPAM(t)
	r := &dcuiRig{root: vmRoot(t), password: "Pw-" + randHex(t, 6)}
	r.service = pamtest.InstallService(t)
	r.group = pamtest.CreateGroup(t)
	r.admin = pamtest.CreateUser(t, r.password, r.group)
	r.outsider = pamtest.CreateUser(t, r.password)
	return r
}

func (r *dcuiRig) argv(extra ...string) []string {
	return append([]string{dcuiBin, "--root", r.root, "--pam-service", r.service, "--admin-group", r.group}, extra...)
}

// hostAddress is an address the status screen must show, "" when the
// host has none.
func hostAddress(t *testing.T) string {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.String()
			}
		}
	}
	return ""
}

func TestIntegrationDCUI(t *testing.T) {
	for _, termEnv := range []string{"vt100", "linux"} {
		t.Run(termEnv, func(t *testing.T) {
			r := newDCUIRig(t)
			tt := startTerm(t, termEnv, r.argv("--idle-timeout", "4s")...)
			host, _ := os.Hostname()
			want := []string{host, "MANAGEMENT", "HEALTH", "F2/l"}
			if a := hostAddress(t); a != "" {
				want = append(want, a)
			}
			screen := tt.waitFor(10*time.Second, want...)
			border := "+-----"
			if termEnv == "linux" {
				border = "┌─────"
			}
			if !strings.Contains(screen, border) {
				t.Errorf("TERM=%s: border %q not on screen:\n%s", termEnv, border, screen)
			}
			if termEnv == "vt100" {
				for i := 0; i < len(screen); i++ {
					if screen[i] > 0x7E && !strings.Contains(host, string(screen[i])) {
						t.Fatalf("TERM=vt100 screen has byte %#x:\n%s", screen[i], screen)
					}
				}
			}

			// letters navigate, but only after login
			tt.keys(true, "v")
			tt.waitFor(5*time.Second, "log in first (F2/l)")

			// a wrong password fails (PAM's delay included)
			tt.login(r.admin, r.password+"x")
			tt.waitFor(15*time.Second, "Login incorrect", "Caps Lock")
			tt.cancelLogin()

			// a user outside the admin group is refused
			tt.login(r.outsider, r.password)
			tt.waitFor(15*time.Second, "not allowed", r.group)
			tt.cancelLogin()

			// the admin logs in and moves between screens by letter
			tt.login(r.admin, r.password)
			tt.waitFor(15*time.Second, r.admin+"@", "[RW]", "Status")
			for _, step := range []struct{ key, title string }{
				{"v", "Virtual machines"}, {"n", "Network"}, {"w", "Hardware"},
				{"g", "Logs"}, {"d", "Diagnostics"}, {"p", "Power"}, {"s", "MANAGEMENT"},
			} {
				tt.keys(true, step.key)
				tt.waitFor(5*time.Second, step.title)
			}

			// the idle lock engages after 4 s without input
			tt.waitFor(10*time.Second, "Console locked", "without input")

			audit, err := os.ReadFile(filepath.Join(r.root, "var/log/virtcon/auth.log"))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{r.admin, r.outsider, "success", "bad-credentials", "not-admin"} {
				if !strings.Contains(string(audit), w) {
					t.Errorf("audit log lacks %q:\n%s", w, audit)
				}
			}
			if strings.Contains(string(audit), r.password) {
				t.Errorf("audit log contains the password")
			}
		})
	}
}

// TestIntegrationDCUISecondConsoleReadOnly: two consoles, one writer.
func TestIntegrationDCUISecondConsoleReadOnly(t *testing.T) {
	r := newDCUIRig(t)
	first := startTerm(t, "xterm-256color", r.argv("--tty", "tty1")...)
	first.waitFor(10*time.Second, "F2/l")
	first.login(r.admin, r.password)
	first.waitFor(15*time.Second, r.admin+"@tty1 [RW]")

	// the second runs through `virt dcui`, as an operator over SSH would
	second := startTerm(t, "xterm-256color", append([]string{virtBin, "dcui"}, r.argv("--tty", "ttyS0")[1:]...)...)
	second.waitFor(10*time.Second, "F2/l")
	second.login(r.admin, r.password)
	second.waitFor(15*time.Second, r.admin+"@ttyS0 [RO]", "holds the console lock", "on tty1")

	// the warning shows once: on another page, through the lock's retries
	// (every 5 s), the header's [RO] says it and the warning stays away
	second.keys(true, "v")
	second.waitFor(5*time.Second, "Virtual machines", r.admin+"@ttyS0 [RO]")
	for deadline := time.Now().Add(7 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if s := second.capture(); strings.Contains(s, "holds the console lock") {
			t.Fatalf("the read-only warning came back on another page:\n%s", s)
		}
	}

	// the writer logs out: the read-only console takes the lock over
	first.keys(true, "x")
	first.waitFor(5*time.Second, "logged out")
	second.waitFor(15*time.Second, r.admin+"@ttyS0 [RW]")
}

// TestIntegrationDCUIStartVM starts a test guest from the VMs screen.
func TestIntegrationDCUIStartVM(t *testing.T) {
	r := newDCUIRig(t)
	g := requireGuest(t)
	name := "dcui-" + randHex(t, 3)
	uid := createGuest(t, r.root, name, g.initrd, false)
	t.Cleanup(func() { killUnder(r.root) })

	tt := startTerm(t, "vt100", r.argv()...)
	tt.waitFor(10*time.Second, "F2/l")
	tt.login(r.admin, r.password)
	tt.waitFor(15*time.Second, "[RW]")
	tt.keys(true, "v")
	tt.waitFor(10*time.Second, name, vm.PhaseStopped)
	tt.keys(true, "a") // start the selected VM
	deadline := time.Now().Add(60 * time.Second)
	for {
		if e := entry(t, r.root, name); e.Phase == vm.PhaseRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %s not running 60 s after pressing start; screen:\n%s", name, tt.capture())
		}
		time.Sleep(250 * time.Millisecond)
	}
	tt.waitFor(15*time.Second, vm.PhaseRunning)

	// its serial console, full screen, and back with Ctrl-]
	waitLog(t, r.root, uid, "VIRTCON-GUEST-READY", 90*time.Second)
	tt.keys(true, "c")
	tt.waitFor(10*time.Second, "Detach with Ctrl-]")
	tt.keys(false, "Enter")
	tt.keys(true, "echo dcui-$((6*7))")
	tt.keys(false, "Enter")
	tt.waitFor(20*time.Second, "dcui-42")
	tt.keys(false, "C-]")
	tt.waitFor(10*time.Second, "console closed", "Virtual machines")
	if e := entry(t, r.root, name); e.Phase != vm.PhaseRunning {
		t.Errorf("VM %s is %s after the console closed; want Running", name, e.Phase)
	}

	// its serial log on the Logs screen, searched
	tt.keys(true, "g")
	tt.waitFor(10*time.Second, "Logs")
	tt.waitFor(10*time.Second, "auth.log") // the file list has loaded
	for i := 0; ; i++ {
		before := cliLine(tt.capture())
		if strings.Contains(before, "virt vm logs") {
			break
		}
		if i == 10 {
			t.Fatalf("no VM serial log among the files after 10 tabs:\n%s", tt.capture())
		}
		// one tab at a time: the next only once this one has shown
		tt.keys(false, "Tab")
		for deadline := time.Now().Add(5 * time.Second); cliLine(tt.capture()) == before; {
			if time.Now().After(deadline) {
				t.Fatalf("tab did not change the file:\n%s", tt.capture())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	tt.waitFor(10*time.Second, "dcui-42") // the log's tail has loaded
	tt.keys(true, "/")
	tt.keys(true, "GUEST-READY")
	tt.keys(false, "Enter")
	tt.waitFor(10*time.Second, "match 1/", "VIRTCON-GUEST-READY")
}

// TestIntegrationDCUIZeroSizePTY: a tty that reports 0x0 (serial lines
// do) gets a whole 80x24 screen.
func TestIntegrationDCUIZeroSizePTY(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	p := startOnPTY(t, []string{"TERM=vt100"}, dcuiBin, "--root", vmRoot(t))
	border := "+" + strings.Repeat("-", 78) + "+"
	deadline := time.Now().Add(10 * time.Second)
	var lines []string
	for {
		text := ansi.Strip(string(p.output()))
		lines = nil
		started := false
		for _, l := range strings.Split(text, "\r\n") {
			if !started && strings.HasSuffix(l, border) {
				started, l = true, border // the clear-screen sequence precedes it
			}
			if started {
				lines = append(lines, l)
				if len(lines) == 24 {
					break
				}
			}
		}
		if len(lines) == 24 && lines[23] == border {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 80x24 frame on a 0x0 pty after 10 s; output:\n%s", text)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, l := range lines[1:23] {
		if len(l) != 80 || l[0] != '|' || l[79] != '|' {
			t.Errorf("line %d is not an 80-column framed line: %q", i+2, l)
		}
	}
}

// TestIntegrationDCUIConsoleModeAndSignals: on the host console (--console)
// q and Ctrl-C do not quit (there is no shell behind it); SIGTERM and
// SIGHUP end it with the terminal restored.
func TestIntegrationDCUIConsoleModeAndSignals(t *testing.T) {
	testutil.RequireRoot(t, needsRoot)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startOnPTY(t, []string{"TERM=linux"}, dcuiBin, "--root", vmRoot(t), "--console")
			p.waitOutput(t, "F2/l", 10*time.Second)
			p.master.Write([]byte("q\x03"))
			p.waitOutput(t, "does not quit", 5*time.Second)
			if err := p.cmd.Process.Signal(syscall.Signal(0)); err != nil {
				t.Fatalf("dcui --console exited on q/Ctrl-C: %v", err)
			}
			start := time.Now()
			p.cmd.Process.Signal(sig)
			exited := make(chan error, 1)
			go func() { exited <- p.cmd.Wait() }()
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				t.Fatalf("dcui still running 5 s after %s", sig)
			}
			t.Logf("exited %s after %s", time.Since(start).Round(time.Millisecond), sig)
			// alternate screen left, cursor shown again
			out := p.waitOutput(t, "\x1b[?1049l", 2*time.Second)
			if !bytes.Contains(out, []byte("\x1b[?25h")) {
				t.Errorf("cursor not restored after %s", sig)
			}
		})
	}
}

func linkIn(ns, name string) bool {
	return exec.Command("ip", "-n", ns, "link", "show", name).Run() == nil
}

// TestIntegrationDCUINetworkTry changes the host network from the Network
// screen, in a namespace of its own: a new bridge is reviewed, applied on
// trial, kept; a second one is applied and rolled back from the dialog.
func TestIntegrationDCUINetworkTry(t *testing.T) {
	r := newDCUIRig(t)
	ns := netns(t)
	tt := startTerm(t, "xterm-256color", append([]string{"ip", "netns", "exec", ns}, r.argv()...)...)
	tt.waitFor(10*time.Second, "F2/l")
	tt.login(r.admin, r.password)
	tt.waitFor(15*time.Second, "[RW]")
	tt.keys(true, "n")
	tt.waitFor(10*time.Second, "MANAGEMENT", "BRIDGES")

	addBridge := func(name string) {
		t.Helper()
		tt.keys(true, "a")
		tt.waitFor(5*time.Second, "Ports")
		tt.keys(true, name)
		tt.keys(false, "C-s") // review
		tt.waitFor(10*time.Second, name, "apply it on trial")
		tt.keys(true, "y")
		tt.waitFor(20*time.Second, "Keep these network settings?")
		if !linkIn(ns, name) {
			t.Fatalf("bridge %s not created during the trial", name)
		}
	}

	addBridge("brdcui0")
	tt.keys(true, "k")
	tt.waitFor(10*time.Second, "kept")
	desired, err := os.ReadFile(filepath.Join(r.root, "etc/virtcon/network.yaml"))
	if err != nil || !strings.Contains(string(desired), "brdcui0") {
		t.Fatalf("network.yaml after keep: %v\n%s", err, desired)
	}
	if fileExists(filepath.Join(r.root, "etc/virtcon/network.yaml.pending")) {
		t.Errorf("network.yaml.pending left after keep")
	}

	addBridge("brdcui1")
	// quitting during the trial asks first; any key but y cancels
	tt.keys(false, "F10")
	tt.waitFor(5*time.Second, "A network change is on trial and rolls back in", "Quit anyway? y/N")
	tt.keys(true, "n")
	tt.waitFor(5*time.Second, "quit cancelled", "Keep these network settings?")
	tt.keys(true, "b")
	tt.waitFor(15*time.Second, "rolled back")
	if linkIn(ns, "brdcui1") {
		t.Errorf("bridge brdcui1 still there after the rollback")
	}
	if !linkIn(ns, "brdcui0") {
		t.Errorf("the kept bridge brdcui0 is gone after rolling back the second change")
	}
	if desired, _ := os.ReadFile(filepath.Join(r.root, "etc/virtcon/network.yaml")); strings.Contains(string(desired), "brdcui1") {
		t.Errorf("network.yaml names the rolled-back bridge:\n%s", desired)
	}

	// the Diagnostics screen writes the bundle and names it
	tt.keys(true, "d")
	tt.waitFor(5*time.Second, "Diagnostics")
	tt.keys(false, "Enter")
	tt.waitFor(60*time.Second, ".tar.gz")
	bundles, _ := filepath.Glob(filepath.Join(r.root, "var/lib/virtcon/diagnostics", "*.tar.gz"))
	if len(bundles) != 1 {
		t.Fatalf("diagnostics bundles: %v; want one", bundles)
	}
	if st, err := os.Stat(bundles[0]); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o600 || st.Size() == 0 {
		t.Errorf("bundle %s: mode %v, %d bytes; want a non-empty 0600 file", bundles[0], st.Mode(), st.Size())
	}
	if out, err := exec.Command("tar", "-tzf", bundles[0]).Output(); err != nil || !strings.Contains(string(out), "checks.json") {
		t.Errorf("bundle %s lists %q (%v); want checks.json among its parts", bundles[0], out, err)
	}
}

// TestIntegrationDCUIConsoleIdle: a VM console left open on the host
// console detaches after the idle timeout and the DCUI locks; the VM runs
// on.
func TestIntegrationDCUIConsoleIdle(t *testing.T) {
	r := newDCUIRig(t)
	g := requireGuest(t)
	name := "idle-" + randHex(t, 3)
	uid := createGuest(t, r.root, name, g.initrd, true)
	t.Cleanup(func() { killUnder(r.root) })
	waitLog(t, r.root, uid, "VIRTCON-GUEST-READY", 90*time.Second)

	tt := startTerm(t, "linux", r.argv("--idle-timeout", "5s")...)
	tt.waitFor(10*time.Second, "F2/l")
	tt.login(r.admin, r.password)
	tt.waitFor(15*time.Second, "[RW]")
	tt.keys(true, "v")
	tt.waitFor(10*time.Second, name, vm.PhaseRunning)
	tt.keys(true, "c")
	tt.waitFor(10*time.Second, "Detach with Ctrl-]")
	start := time.Now()
	tt.waitFor(15*time.Second, "Console locked", "without input")
	if took := time.Since(start); took < 4*time.Second {
		t.Errorf("locked %s after the console opened; want the 5 s idle timeout", took)
	}
	if e := entry(t, r.root, name); e.Phase != vm.PhaseRunning {
		t.Errorf("VM %s is %s after the idle detach; want Running", name, e.Phase)
	}
}
