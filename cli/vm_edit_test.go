package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestShellWords(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"vi", []string{"vi"}, false},
		{"  code   --wait ", []string{"code", "--wait"}, false},
		{`emacs -nw "my file"`, []string{"emacs", "-nw", "my file"}, false},
		{`'/opt/My Editor/bin/ed' -x`, []string{"/opt/My Editor/bin/ed", "-x"}, false},
		{`a\ b c`, []string{"a b", "c"}, false},
		{`"a \"q\" \$x \n"`, []string{`a "q" $x \n`}, false},
		{`x''y ""`, []string{"xy", ""}, false},
		{"vim; rm -rf /", []string{"vim;", "rm", "-rf", "/"}, false}, // no shell: ; is a character
		{"$(reboot)", []string{"$(reboot)"}, false},
		{`"open`, nil, true},
		{`'open`, nil, true},
		{`trail\`, nil, true},
		{"   ", nil, true},
	}
	for _, tt := range tests {
		got, err := shellWords(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("shellWords(%q) err = %v; want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
			t.Errorf("shellWords(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestEditorArgv(t *testing.T) {
	has := func(names ...string) func(string) (string, error) {
		return func(n string) (string, error) {
			for _, h := range names {
				if h == n {
					return "/usr/bin/" + n, nil
				}
			}
			return "", errors.New("not found")
		}
	}
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	tests := []struct {
		name   string
		env    map[string]string
		lookup func(string) (string, error)
		want   string
	}{
		{"visual first", map[string]string{"VISUAL": "code --wait", "EDITOR": "vim"}, has("vi"), "code|--wait"},
		{"editor", map[string]string{"EDITOR": "vim -u NONE"}, has("vi"), "vim|-u|NONE"},
		{"vi", nil, has("vi", "nano"), "/usr/bin/vi"},
		{"editor alternative", nil, has("editor", "nano"), "/usr/bin/editor"},
		{"nano", nil, has("nano"), "/usr/bin/nano"},
		{"blank is unset", map[string]string{"EDITOR": "  "}, has("nano"), "/usr/bin/nano"},
	}
	for _, tt := range tests {
		got, err := editorArgv(env(tt.env), tt.lookup)
		if err != nil || strings.Join(got, "|") != tt.want {
			t.Errorf("%s: editorArgv = %q, %v; want %s", tt.name, got, err, tt.want)
		}
	}
	if _, err := editorArgv(env(nil), has()); err == nil {
		t.Error("no editor at all: no error")
	}
	if _, err := editorArgv(env(map[string]string{"EDITOR": `"vim`}), has("vi")); ExitCode(err) != ExitUsage {
		t.Errorf("a bad $EDITOR: %v (exit %d); want a usage error", err, ExitCode(err))
	}
}

func TestUnifiedDiff(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n"
	b := "a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk\nl\n"
	want := `--- x
+++ y
@@ -1,7 +1,7 @@
 a
 b
 c
-d
+D
 e
 f
 g
@@ -9,3 +9,4 @@
 i
 j
 k
+l
`
	if got := unifiedDiff("x", "y", a, b); got != want {
		t.Errorf("diff:\n%s\nwant:\n%s", got, want)
	}
	if got := unifiedDiff("x", "y", a, a); got != "" {
		t.Errorf("diff of equal texts: %q", got)
	}
}

// fakeEditor writes an editor script: each run takes the next of steps,
// a sed script applied to the file (an empty one leaves it unchanged,
// "EMPTY" empties it), and copies the file as it found it to
// <dir>/seen.N.
func fakeEditor(t *testing.T, dir string, steps ...string) string {
	t.Helper()
	var sb strings.Builder
	sb.WriteString("#!/bin/sh\nset -e\nf=\"$1\"\nn=$(cat " + dir + "/count 2>/dev/null || echo 0)\necho $((n+1)) > " + dir + "/count\ncp \"$f\" " + dir + "/seen.$n\n")
	sb.WriteString("if [ -e " + dir + "/hold ]; then touch " + dir + "/held; while [ -e " + dir + "/hold ]; do sleep 0.05; done; fi\n")
	sb.WriteString("case $n in\n")
	for i, s := range steps {
		switch s {
		case "":
			sb.WriteString("  " + string(rune('0'+i)) + ") ;;\n")
		case "EMPTY":
			sb.WriteString("  " + string(rune('0'+i)) + ") : > \"$f\" ;;\n")
		default:
			sb.WriteString("  " + string(rune('0'+i)) + ") sed -i '" + s + "' \"$f\" ;;\n")
		}
	}
	sb.WriteString("  *) echo 'editor run too often' >&2; exit 9 ;;\nesac\n")
	p := filepath.Join(dir, "editor.sh")
	if err := os.WriteFile(p, []byte(sb.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func readSeen(t *testing.T, dir string, n int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "seen."+string(rune('0'+n))))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestVMEdit(t *testing.T) {
	root, kernel := vmRoot(t)
	createdUID(t, root, kernel, "ed", "--memory", "256", "--cloud-init-user-data", writeFile(t, root, "ud", "#cloud-config\nhostname: secret-name\n"))

	t.Run("valid edit applied, diff shown", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("VISUAL", "")
		t.Setenv("TMPDIR", dir)
		t.Setenv("EDITOR", fakeEditor(t, dir, "s/memoryMiB: 256/memoryMiB: 384/"))
		out, errOut, code := run(t, "--root", root, "vm", "edit", "ed")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		for _, w := range []string{"-memoryMiB: 256", "+memoryMiB: 384", "virtualmachine/ed configured"} {
			if !strings.Contains(out, w) {
				t.Errorf("stdout lacks %q:\n%s", w, out)
			}
		}
		seen := readSeen(t, dir, 0)
		if strings.Contains(seen, "status:") || strings.Contains(seen, "secret-name") {
			t.Errorf("the editor saw the status or the user data:\n%s", seen)
		}
		show := mustRun(t, "--root", root, "vm", "show", "ed", "-o", "yaml")
		if !strings.Contains(show, "memoryMiB: 384") || !strings.Contains(show, "generation: 2") {
			t.Errorf("after the edit:\n%s", show)
		}
		if ud := userDataOf(t, root, "ed"); !strings.Contains(ud, "secret-name") {
			t.Errorf("the user data was lost: %q", ud)
		}
		leftovers(t, dir)
	})

	t.Run("invalid edit reopens with the errors, then a valid one", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("EDITOR", fakeEditor(t, dir, "s/cpus: 1/cpus: -3/", "s/cpus: -3/cpus: 2/"))
		out, errOut, code := run(t, "--root", root, "vm", "edit", "ed")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		second := readSeen(t, dir, 1)
		if !strings.HasPrefix(second, "# The edit could not be applied:\n#   ") || !strings.Contains(second, "spec.cpus") {
			t.Errorf("the reopened file does not start with the error:\n%s", second)
		}
		if !strings.Contains(second, "cpus: -3") {
			t.Errorf("the reopened file lost the user's edit:\n%s", second)
		}
		if !strings.Contains(out, "+cpus: 2") || !strings.Contains(out, "configured") {
			t.Errorf("stdout:\n%s", out)
		}
		if !strings.Contains(mustRun(t, "--root", root, "vm", "show", "ed", "-o", "yaml"), "cpus: 2") {
			t.Error("the valid edit was not applied")
		}
	})

	t.Run("an unknown field and a bad value: both reported", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("EDITOR", fakeEditor(t, dir, `s/cpus: 2/cpus: -3\n  colour: blue/`, "EMPTY"))
		_, errOut, code := run(t, "--root", root, "vm", "edit", "ed")
		if code != 0 || !strings.Contains(errOut, "edit cancelled") {
			t.Errorf("exit %d: %s", code, errOut)
		}
		second := readSeen(t, dir, 1)
		for _, w := range []string{"spec.colour: unknown field", "spec.cpus: must be at least 1 (got -3)"} {
			if !strings.Contains(second, w) {
				t.Errorf("the reopened file lacks %q (only the unknown field was reported):\n%s", w, second)
			}
		}
	})

	t.Run("new user data applied, not shown in the diff", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("EDITOR", fakeEditor(t, dir, `s/userData: .*/userData: "#cloud-config\\nhostname: other-secret\\n"/`))
		out, errOut, code := run(t, "--root", root, "vm", "edit", "ed")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if strings.Contains(out+errOut, "other-secret") || !strings.Contains(out, "[REDACTED] (changed)") {
			t.Errorf("the diff shows the user data, or not that it changed:\n%s%s", out, errOut)
		}
		if ud := userDataOf(t, root, "ed"); !strings.Contains(ud, "other-secret") {
			t.Errorf("the new user data was not applied: %q", ud)
		}
	})

	for _, tt := range []struct{ name, step string }{{"unchanged cancels", ""}, {"empty cancels", "EMPTY"}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			before := mustRun(t, "--root", root, "vm", "show", "ed", "-o", "yaml")
			t.Setenv("EDITOR", fakeEditor(t, dir, tt.step))
			out, errOut, code := run(t, "--root", root, "vm", "edit", "ed")
			if code != 0 || !strings.Contains(errOut, "edit cancelled, no changes") || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 0 and a cancel", code, out, errOut)
			}
			if after := mustRun(t, "--root", root, "vm", "show", "ed", "-o", "yaml"); after != before {
				t.Errorf("the VM changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}

	t.Run("uid edit refused, then the edit given up", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("EDITOR", fakeEditor(t, dir, "s/uid: .*/uid: 11111111-2222-4333-8444-555555555555/", "EMPTY"))
		_, errOut, code := run(t, "--root", root, "vm", "edit", "ed")
		if code != 0 || !strings.Contains(errOut, "edit cancelled") {
			t.Errorf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(readSeen(t, dir, 1), "identity cannot be edited") {
			t.Errorf("reopened without the uid error:\n%s", readSeen(t, dir, 1))
		}
	})

	t.Run("concurrent change refused, the edit kept", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("EDITOR", fakeEditor(t, dir, "s/memoryMiB: 384/memoryMiB: 512/"))
		t.Setenv("TMPDIR", dir)
		if err := os.WriteFile(filepath.Join(dir, "hold"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var out, errOut string
		var code int
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, errOut, code = run(t, "--root", root, "vm", "edit", "ed")
		}()
		waitFile(t, filepath.Join(dir, "held"))
		// someone else changes the spec while the editor is open
		mustRun(t, "--root", root, "vm", "autostart", "ed", "on")
		os.Remove(filepath.Join(dir, "hold"))
		wg.Wait()
		if code == 0 || !strings.Contains(errOut, "changed while it was being edited") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want a refusal", code, out, errOut)
		}
		kept := keptFile(t, errOut)
		b, err := os.ReadFile(kept)
		if err != nil || !strings.Contains(string(b), "memoryMiB: 512") {
			t.Errorf("the edited file %s: %v\n%s", kept, err, b)
		}
		if st, err := os.Stat(kept); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("kept file mode: %v %v; want 0600", st.Mode(), err)
		}
		if show := mustRun(t, "--root", root, "vm", "show", "ed", "-o", "yaml"); strings.Contains(show, "memoryMiB: 512") {
			t.Error("the edit was applied over the concurrent change")
		}
	})
}

// keptFile is the path the refusal names.
func keptFile(t *testing.T, errOut string) string {
	t.Helper()
	i := strings.Index(errOut, "kept in ")
	if i < 0 {
		t.Fatalf("no kept file named: %s", errOut)
	}
	rest := errOut[i+len("kept in "):]
	return strings.Fields(rest)[0]
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(p); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not appear", p)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// leftovers fails if vm edit left a temp file in dir (its TMPDIR).
func leftovers(t *testing.T, dir string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(dir, "virt-edit-*")); len(m) > 0 {
		t.Errorf("temp files left: %v", m)
	}
}
