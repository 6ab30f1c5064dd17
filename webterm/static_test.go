package webterm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"maps"
	"mime"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func readStatic(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(Static, name)
	if err != nil {
		t.Fatalf("Static: %v", err)
	}
	return string(b)
}

var (
	htmlRefRE   = regexp.MustCompile(`\b(?:src|href)\s*=\s*["']([^"']*)["']`)
	jsImportRE  = regexp.MustCompile(`(?m)^\s*import\b[^'"]*['"]([^'"]+)['"]`)
	scriptTagRE = regexp.MustCompile(`(?is)<script\b([^>]*)>(.*?)</script\s*>`)
)

// scriptFiles lists every script in Static.
func scriptFiles(t *testing.T) []string {
	t.Helper()
	var names []string
	err := fs.WalkDir(Static, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && (path.Ext(name) == ".js" || path.Ext(name) == ".mjs") {
			names = append(names, name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 4 {
		t.Fatalf("scripts in Static: %v; want app.js, xterm-csp.js, xterm and the fit addon", names)
	}
	return names
}

// TestStaticReferencesExist: every file the page loads (index.html's src
// and href, app.js's imports) is in the embedded tree, so the page never
// 404s into a blank terminal.
func TestStaticReferencesExist(t *testing.T) {
	type ref struct{ from, target string }
	var refs []ref
	for _, m := range htmlRefRE.FindAllStringSubmatch(readStatic(t, "index.html"), -1) {
		refs = append(refs, ref{"index.html", m[1]})
	}
	for _, m := range jsImportRE.FindAllStringSubmatch(readStatic(t, "app.js"), -1) {
		refs = append(refs, ref{"app.js", m[1]})
	}
	imports := 0
	for _, r := range refs {
		if r.from == "app.js" {
			imports++
		}
	}
	if len(refs) < 3 || imports < 2 {
		t.Fatalf("found %d references (%d imports in app.js): %v; want the stylesheets, app.js, xterm and the fit addon", len(refs), imports, refs)
	}
	for _, r := range refs {
		if strings.HasPrefix(r.target, "/") || strings.Contains(r.target, ":") {
			t.Errorf("%s: reference %q: want a path relative to the page", r.from, r.target)
			continue
		}
		name := path.Clean(path.Join(path.Dir(r.from), r.target))
		if _, err := fs.Stat(Static, name); err != nil {
			t.Errorf("%s: reference %q: %v", r.from, r.target, err)
		}
	}
}

// TestStaticPageContract: the ids the server's browser tests drive.
func TestStaticPageContract(t *testing.T) {
	page := readStatic(t, "index.html")
	for _, want := range []string{
		`<form id="login"`,
		`id="user"`,
		`id="password" name="password" type="password"`,
		`id="login-error"`,
		`type="submit"`,
		`<div id="terminal" hidden>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("index.html lacks %s", want)
		}
	}
	js := readStatic(t, "app.js")
	// The CSP shim must run before xterm's module is evaluated and used.
	first := ""
	if m := jsImportRE.FindStringSubmatch(js); m != nil {
		first = m[1]
	}
	if first != "./xterm-csp.js" {
		t.Errorf("app.js: first import %q; want ./xterm-csp.js (xterm's styles are refused under the CSP without it)", first)
	}
	for _, want := range []string{"window.__term = term", "'virtcon.webterm.v1'", "binaryType = 'arraybuffer'", "'X-CSRF-Token'"} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js lacks %s", want)
		}
	}
}

// TestStaticCSPClean: under Content-Security-Policy default-src 'self' an
// inline script, an inline style, an event-handler attribute or eval does
// not run, and an external URL would be a way out; none may be needed.
func TestStaticCSPClean(t *testing.T) {
	page := readStatic(t, "index.html")
	scripts := scriptTagRE.FindAllStringSubmatch(page, -1)
	if len(scripts) == 0 {
		t.Error("index.html: no <script> tag")
	}
	for _, m := range scripts {
		if !strings.Contains(m[1], "src=") || strings.TrimSpace(m[2]) != "" {
			t.Errorf("index.html: inline script %q", m[0])
		}
	}
	if n := strings.Count(strings.ToLower(page), "<script"); n != len(scripts) {
		t.Errorf("index.html: %d <script tags, %d well-formed", n, len(scripts))
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)\sstyle\s*=`),
		regexp.MustCompile(`(?i)<style\b`),
		regexp.MustCompile(`(?i)\son[a-z]+\s*=`),
		regexp.MustCompile(`(?i)https?://`),
		regexp.MustCompile(`(?i)javascript:`),
		regexp.MustCompile(`//[a-z0-9.-]+\.[a-z]`), // a scheme-relative URL
	} {
		if loc := bad.FindStringIndex(page); loc != nil {
			t.Errorf("index.html: %q at offset %d (want none: CSP default-src 'self')", page[loc[0]:loc[1]], loc[0])
		}
	}
	for _, name := range []string{"app.js", "app.css"} {
		if m := regexp.MustCompile(`(?i)https?://\S*`).FindString(readStatic(t, name)); m != "" {
			t.Errorf("%s: external URL %q", name, m)
		}
	}
	evalRE := regexp.MustCompile(`\beval\s*\(|\bnew\s+Function\b|\bFunction\s*\(`)
	for _, name := range scriptFiles(t) {
		if m := evalRE.FindString(readStatic(t, name)); m != "" {
			t.Errorf("%s: %q (CSP without 'unsafe-eval' refuses it)", name, m)
		}
	}
}

// TestStaticContentTypes: with nosniff a browser runs a module only when it
// comes as JavaScript and applies a stylesheet only as text/css; the server
// types files by extension (mime.TypeByExtension).
func TestStaticContentTypes(t *testing.T) {
	want := map[string]string{".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css"}
	err := fs.WalkDir(Static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ext := path.Ext(name)
		if ext == "" {
			return nil // LICENSE, INTEGRITY, SHA256SUMS: sniffed as text, never run
		}
		w, ok := want[ext]
		if !ok {
			t.Errorf("%s: extension %q not one the page serves (%v)", name, ext, want)
			return nil
		}
		if got := mime.TypeByExtension(ext); !strings.HasPrefix(got, w) {
			t.Errorf("%s: served as %q; want %s", name, got, w)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStaticVendorIntegrity: the vendored xterm.js is what
// scripts/vendor-xterm.sh took from the tarballs recorded in
// vendor/INTEGRITY. xterm 6.0.0's xterm.mjs carries no version string,
// so the script ties the two with vendor/SHA256SUMS, written from the
// checked tarballs; a file edited by hand, missing or extra fails here.
func TestStaticVendorIntegrity(t *testing.T) {
	specs := map[string]string{} // name@version -> sha512
	sc := bufio.NewScanner(strings.NewReader(readStatic(t, "vendor/INTEGRITY")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || !strings.HasPrefix(f[1], "sha512-") {
			t.Fatalf("INTEGRITY: line %q: want <name>@<version> sha512-<base64>", line)
		}
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(f[1], "sha512-")); err != nil || len(raw) != 64 {
			t.Errorf("INTEGRITY: %s: hash %q is not a base64 sha512 (%d bytes, %v)", f[0], f[1], len(raw), err)
		}
		specs[f[0]] = f[1]
	}

	// The pins in the script are the ones recorded.
	script, err := os.ReadFile(filepath.Join("..", "scripts", "vendor-xterm.sh"))
	if err != nil {
		t.Fatal(err)
	}
	pins := regexp.MustCompile(`(?m)^(?:XTERM|FIT)=(\S+)$`).FindAllSubmatch(script, -1)
	if len(pins) != 2 {
		t.Fatalf("scripts/vendor-xterm.sh: found %d pins; want XTERM= and FIT=", len(pins))
	}
	for _, p := range pins {
		if _, ok := specs[string(p[1])]; !ok {
			t.Errorf("scripts/vendor-xterm.sh pins %s; INTEGRITY records %v", p[1], specs)
		}
	}
	if len(specs) != len(pins) {
		t.Errorf("INTEGRITY records %d packages %v; the script pins %d", len(specs), specs, len(pins))
	}

	listed := map[string]bool{}
	sc = bufio.NewScanner(strings.NewReader(readStatic(t, "vendor/SHA256SUMS")))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS: line %q: want <sha256>  <path>", sc.Text())
		}
		listed[name] = true
		b, err := fs.ReadFile(Static, "vendor/"+name)
		if err != nil {
			t.Errorf("SHA256SUMS lists %s: %v", name, err)
			continue
		}
		got := sha256.Sum256(b)
		if hex.EncodeToString(got[:]) != sum {
			t.Errorf("vendor/%s: sha256 %x; SHA256SUMS records %s (rerun make vendor-xterm)", name, got, sum)
		}
	}
	err = fs.WalkDir(Static, "vendor", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(name, "vendor/")
		if rel != "INTEGRITY" && rel != "SHA256SUMS" && !listed[rel] {
			t.Errorf("vendor/%s is not in SHA256SUMS: not from the checked tarballs", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ file, want string }{
		{"vendor/xterm/LICENSE", "Permission is hereby granted"},
		{"vendor/addon-fit/LICENSE", "Permission is hereby granted"},
		{"vendor/xterm/xterm.mjs", " as Terminal}"},
		{"vendor/addon-fit/addon-fit.mjs", " as FitAddon}"},
		{"vendor/xterm/xterm.css", ".xterm-helper-textarea"},
	} {
		if !strings.Contains(readStatic(t, c.file), c.want) {
			t.Errorf("%s lacks %q", c.file, c.want)
		}
	}
}

// TestStaticJSSyntax: node parses app.js and the vendored modules as ES
// modules (the browser tests find a broken page only much later).
func TestStaticJSSyntax(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("needs node for a syntax check of app.js (Debian: apt-get install nodejs)")
	}
	dir := t.TempDir()
	for i, name := range scriptFiles(t) {
		// .mjs: node checks it as an ES module whatever package.json says.
		copyPath := filepath.Join(dir, strings.Repeat("x", i+1)+".mjs")
		if err := os.WriteFile(copyPath, []byte(readStatic(t, name)), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(node, "--check", copyPath)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("node --check %s: %v\n%s", name, err, out.String())
		}
	}
}

// TestPageControlFramesAreSent: every control frame the page acts on is
// one the server sends (a {"t": …} in its Go source); a handler for a
// frame that never comes is dead code that reads as a feature.
func TestPageControlFramesAreSent(t *testing.T) {
	js, err := fs.ReadFile(Static, "app.js")
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	srcs, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range srcs {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`controlMsg\{T: "([a-z-]+)"`).FindAllStringSubmatch(string(b), -1) {
			sent[m[1]] = true
		}
	}
	if len(sent) == 0 {
		t.Fatal("no control frame found in the server's source; the pattern is stale")
	}
	handled := regexp.MustCompile(`m\.t === '([a-z-]+)'`).FindAllStringSubmatch(string(js), -1)
	if len(handled) == 0 {
		t.Fatal("app.js handles no control frame; the pattern is stale")
	}
	for _, m := range handled {
		if !sent[m[1]] {
			t.Errorf("app.js handles control frame %q, which the server never sends (it sends %v)", m[1], slices.Sorted(maps.Keys(sent)))
		}
	}
}
