//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Targets of issue 12's speed section.
const (
	benchWebLoginTarget = 500 * time.Millisecond
	benchWebKeyTarget   = 30 * time.Millisecond
	benchWebRSS1KiB     = 60 << 10
	benchWebRSS4KiB     = 150 << 10
)

// evalMs runs js (a promise of a number of milliseconds, measured in the
// page on its own clock) and returns it.
func (b *browser) evalMs(js string) time.Duration {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	var ms float64
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var err error
		ms, err = chromedp.Evaluate[float64](js, chromedp.EvalAwaitPromise)(ctx, tg)
		return err
	}))
	if err != nil {
		b.t.Fatalf("browser: %v\nscreen:\n%s", err, b.screenNoFail())
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// pageScreenJS defines screen() in a measuring script: xterm.js's buffer.
const pageScreenJS = `const screen = () => { const t = window.__term; if (!t) return ''; const b = t.buffer.active; let s = ''; for (let i = 0; i < b.length; i++) s += b.getLine(i).translateToString(true) + '\n'; return s; };`

// loginToFrameJS submits the form and resolves with the milliseconds until
// the DCUI's first whole frame (its legend and the writer's [RW]) is in
// xterm.js's buffer, polled every 2 ms in the page.
func loginToFrameJS(user, password string) string {
	return fmt.Sprintf(`new Promise((resolve, reject) => { %s
		document.getElementById('user').value = %q; document.getElementById('password').value = %q;
		const t0 = performance.now();
		document.getElementById('login-submit').click();
		const tick = () => {
			const s = screen();
			if (s.includes('F10/q') && s.includes('[RW]')) return resolve(performance.now() - t0);
			if (performance.now() - t0 > 20000) return reject('no DCUI frame in 20 s: ' + s);
			setTimeout(tick, 2);
		};
		tick(); })`, pageScreenJS, user, password)
}

// keyEchoJS types key into the terminal (as the keyboard would: xterm.js's
// input) and resolves with the milliseconds until xterm.js has parsed the
// output that moves the VMs screen's cursor.
func keyEchoJS(key string) string {
	return fmt.Sprintf(`new Promise((resolve, reject) => { %s
		const pos = () => { const m = screen().match(/^. (\d+)\/(\d+)  \S/m); return m ? m[1] : ''; };
		const before = pos();
		const t0 = performance.now();
		// checked as each write is parsed (no polling, whose timers the
		// browser clamps to 4 ms)
		const sub = window.__term.onWriteParsed(() => {
			const p = pos();
			if (p !== '' && p !== before) { sub.dispose(); clearTimeout(limit); resolve(performance.now() - t0); }
		});
		const limit = setTimeout(() => { sub.dispose(); reject('cursor still at ' + before); }, 5000);
		window.__term.input(%q, true); })`, pageScreenJS, key)
}

// rssKiB is the VmRSS of the processes, summed: pages they share (the
// dcui program's text, mapped by every session) count once per process.
func rssKiB(t *testing.T, pids ...int) int {
	t.Helper()
	sum := 0
	for _, pid := range pids {
		sum += procStatusKiB(t, pid, "VmRSS")["VmRSS"]
	}
	return sum
}

// pssKiB is their proportional set size (smaps_rollup's Pss), summed:
// a shared page counts once in all, what the machine really spends.
func pssKiB(t *testing.T, pids ...int) int {
	t.Helper()
	sum := 0
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
				n, _ := strconv.Atoi(f[1])
				sum += n
			}
		}
	}
	return sum
}

// TestWebtermBench: login to the first full DCUI frame in the browser
// against the DCUI's own first frame on a local pty; a keystroke to its
// echo through the browser against the same key through tmux; the RSS of
// the server with one session and with four.
func TestWebtermBench(t *testing.T) {
	requireBench(t)
	requireChromium(t)
	r := startWebterm(t, "--max-per-user", "4")
	vms := benchVMSpecs(t, r.root, "web", 3)

	// baseline: the DCUI's own first frame on a local pty (80x24, as TestDCUIBenchFirstFrame)
	dcui := []string{dcuiBin, "--root", r.root, "--size", "80x24"}
	env := benchEnv("xterm-256color")
	timeToOutput(dcui, env, "╯", "F10/q") // warm the page cache
	var local []time.Duration
	for range benchRuns {
		d, err := timeToOutput(dcui, env, "╯", "F10/q")
		if err != nil {
			t.Fatal(err)
		}
		local = append(local, d)
	}

	// login to the first frame, each time from a fresh page and a logout
	b := newBrowser(t, r)
	var logins []time.Duration
	for i := range 5 {
		if i > 0 {
			b.eval(`(() => { document.getElementById('logout').click(); return '' })()`)
			b.run(chromedp.WaitVisible(chromedp.CSS("#login")))
			waitFor(t, 10*time.Second, func() bool { return len(childrenOf(r.cmd.Process.Pid)) == 0 })
			b.run(chromedp.Reload())
		}
		b.run(chromedp.WaitVisible(chromedp.CSS("#login")))
		logins = append(logins, b.evalMs(loginToFrameJS(r.admin, r.password)))
	}

	// a key through the browser: the VMs screen's cursor moves
	b.keys("v")
	b.waitScreen(15*time.Second, vms[0].Metadata.Name, vms[2].Metadata.Name)
	var keys []time.Duration
	for i := range 2 * benchRuns {
		k := "j"
		if i%2 == 1 {
			k = "k"
		}
		time.Sleep(60 * time.Millisecond) // spread the keys over the renderer's frames
		keys = append(keys, b.evalMs(keyEchoJS(k)))
	}
	server := r.cmd.Process.Pid
	rss1 := rssKiB(t, append([]int{server}, childrenOf(server)...)...)
	pss1 := pssKiB(t, append([]int{server}, childrenOf(server)...)...)

	// the same key through tmux, a DCUI logged in on a local terminal
	tt := startTerm(t, "xterm-256color", dcuiBin, "--root", r.root, "--pam-service", r.service, "--admin-group", r.group)
	tt.waitFor(10*time.Second, "F2/l")
	tt.login(r.admin, r.password)
	tt.waitFor(15*time.Second, "[RO]") // the browser's session holds the lock; the list moves all the same
	tt.keys(true, "v")
	tt.waitFor(15*time.Second, vms[0].Metadata.Name)
	var tmux []time.Duration
	for range 2 * benchRuns {
		d, err := tt.keyLatency(time.Millisecond, 60*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		tmux = append(tmux, d)
	}

	// four sessions: three more tabs of the same browser
	for range 3 {
		tab := b.tab(r.url + "/")
		tab.waitScreen(20*time.Second, "F10/q")
	}
	var kids []int
	waitFor(t, 10*time.Second, func() bool { kids = childrenOf(server); return len(kids) == 4 })
	rss4 := rssKiB(t, append([]int{server}, kids...)...)
	pss4 := pssKiB(t, append([]int{server}, kids...)...)

	ls, lb := statsOf(logins), statsOf(local)
	ks, kb := statsOf(keys), statsOf(tmux)
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISSED"
	}
	mb := func(kib int) string { return strconv.FormatFloat(float64(kib)/1024, 'f', 1, 64) + " MB" }
	t.Logf("baseline: dcui first frame on a local pty (80x24): %s (%d runs)", lb, len(local))
	t.Logf("web: login to the first full DCUI frame in chromium: %s (%d logins)", ls, len(logins))
	t.Logf("web login: %.2fx the target %v (%s), %.2fx the local first frame", float64(ls.med)/float64(benchWebLoginTarget), benchWebLoginTarget,
		verdict(ls.med < benchWebLoginTarget), float64(ls.med)/float64(lb.med))
	t.Logf("baseline: key -> screen change through tmux (send-keys, capture-pane every 1 ms): %s (%d keys)", kb, len(tmux))
	t.Logf("web: key -> screen change in chromium's xterm.js: %s (%d keys)", ks, len(keys))
	t.Logf("web keystroke: %.2fx the target %v (%s), %.2fx tmux", float64(ks.med)/float64(benchWebKeyTarget), benchWebKeyTarget,
		verdict(ks.med < benchWebKeyTarget), float64(ks.med)/float64(kb.med))
	t.Logf("web RSS: server + 1 session %s: %.2fx the target %s (%s); + 4 sessions %s: %.2fx the target %s (%s)",
		mb(rss1), float64(rss1)/benchWebRSS1KiB, mb(benchWebRSS1KiB), verdict(rss1 < benchWebRSS1KiB),
		mb(rss4), float64(rss4)/benchWebRSS4KiB, mb(benchWebRSS4KiB), verdict(rss4 < benchWebRSS4KiB))
	t.Logf("web PSS (shared pages counted once): server + 1 session %s (%.2fx the RSS target); + 4 sessions %s (%.2fx)",
		mb(pss1), float64(pss1)/benchWebRSS1KiB, mb(pss4), float64(pss4)/benchWebRSS4KiB)
}
