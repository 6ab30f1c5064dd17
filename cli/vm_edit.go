package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/internal/redact"
	"github.com/virtcon/virtcon/vm"
)

// editService is what `virt vm edit` asks of the core: the manifest, and
// the same Apply as `virt apply -f`.
type editService interface {
	Get(ctx context.Context, ref string) (*vm.VirtualMachine, *vm.Entry, error)
	Apply(ctx context.Context, in *vm.VirtualMachine) (*vm.ApplyResult, error)
}

var _ editService = (*vm.Manager)(nil)

// ErrEditConflict is an edit refused because the VM changed (its
// generation moved) while the editor was open.
var ErrEditConflict = errors.New("the VM changed while it was being edited")

// editManifest is the manifest as `vm edit` shows it: no status, which
// is the host's to say, not the user's to edit.
type editManifest struct {
	APIVersion string      `yaml:"apiVersion"`
	Kind       string      `yaml:"kind"`
	Metadata   vm.Metadata `yaml:"metadata"`
	Spec       vm.Spec     `yaml:"spec"`
}

// editHeader starts the file the editor opens; lines starting with # are
// dropped before the manifest is read.
const editHeader = `# Edit the VM's manifest; it is applied as by virt apply -f when you save
# and quit. An empty file, or one left unchanged, cancels the edit.
# Lines starting with '#' are ignored. The cloud-init user data is shown
# as [REDACTED]: leave it so to keep what is stored.
#
`

func newVMEditCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "edit NAME",
		Short: "Edit a VM's manifest in $EDITOR, show the diff and apply it through admission",
		Long: `Open the VM's manifest (YAML, without status) in $VISUAL or $EDITOR (else vi,
editor or nano, whichever is installed) and apply what you save, as
virt apply -f does: the same admission, the same checks. The unified diff of
the spec is printed before it is applied.

An edit that does not pass admission reopens the editor with the errors as
comments at the top; fix it, or empty the file to give up. An unchanged or
empty file cancels the edit. If the VM changed while the editor was open
(its generation moved), nothing is applied and your edited file is kept: its
path is printed.

The editor runs directly (no shell): $EDITOR is split into words as a shell
would split it (quotes and backslashes), without expansions.`,
		Example: `  virt vm edit web
  EDITOR="code --wait" virt vm edit web`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			argv, err := editorArgv(os.Getenv, exec.LookPath)
			if err != nil {
				return err
			}
			return editVM(cmd.Context(), editRun{
				svc: env.vms(), ref: args[0], editor: argv,
				in: env.IO.In, out: env.IO.Out, errOut: env.IO.ErrOut,
			})
		},
	}
}

type editRun struct {
	svc     editService
	ref     string
	editor  []string
	in      io.Reader
	out     io.Writer
	errOut  io.Writer
	tempDir string // "": os.TempDir()
}

// editVM is the edit loop: write the manifest to a 0600 file, run the
// editor, read what it left, and apply it, or reopen the file with the
// errors on top.
func editVM(ctx context.Context, r editRun) error {
	v, e, err := r.svc.Get(ctx, r.ref)
	if err != nil {
		return err
	}
	if v == nil {
		return fmt.Errorf("vm %q: edit: it is %s, not managed by virtcon: nothing to edit", r.ref, e.Class)
	}
	v = vm.Redacted(v)
	orig, err := marshalEdit(v)
	if err != nil {
		return fmt.Errorf("vm %q: edit: %w", v.Metadata.Name, err)
	}
	f, err := os.CreateTemp(r.tempDir, "virt-edit-"+safeFileName(v.Metadata.Name)+"-*.yaml")
	if err != nil {
		return fmt.Errorf("vm %q: edit: %w", v.Metadata.Name, err)
	}
	path := f.Name()
	keep := false
	defer func() {
		if !keep {
			os.Remove(path)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("vm %q: edit: %w", v.Metadata.Name, err)
	}
	_, err = f.Write(append([]byte(editHeader), orig...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("vm %q: edit: %w", v.Metadata.Name, err)
	}
	for {
		if err := runEditor(ctx, r, path); err != nil {
			keep = true
			return fmt.Errorf("vm %q: edit: %w (your file is kept: %s)", v.Metadata.Name, err, path)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("vm %q: edit: %w", v.Metadata.Name, err)
		}
		body := stripComments(raw)
		if len(bytes.TrimSpace(body)) == 0 || bytes.Equal(bytes.TrimSpace(body), bytes.TrimSpace(orig)) {
			fmt.Fprintln(r.errOut, "edit cancelled, no changes")
			return nil
		}
		in, err := decodeEdit(body, v)
		if err == nil {
			var cur *vm.VirtualMachine
			cur, _, err = r.svc.Get(ctx, v.Metadata.UID)
			switch {
			case err != nil:
				keep = true
				return fmt.Errorf("vm %q: edit: %w (your file is kept: %s)", v.Metadata.Name, err, path)
			case cur == nil || cur.Metadata.Generation != v.Metadata.Generation:
				keep = true
				got := int64(-1)
				if cur != nil {
					got = cur.Metadata.Generation
				}
				return fmt.Errorf("vm %q: edit: %w (generation %d when the edit began, now %d): nothing applied; your edit is kept in %s (virt vm edit %s again and copy it over, or virt apply -f it)",
					v.Metadata.Name, ErrEditConflict, v.Metadata.Generation, got, path, v.Metadata.Name)
			}
			fmt.Fprint(r.out, unifiedDiff("spec (stored)", "spec (edited)", specYAML(v.Spec), specYAML(diffSpec(in.Spec))))
			var res *vm.ApplyResult
			res, err = r.svc.Apply(ctx, in)
			if err == nil {
				fmt.Fprintf(r.out, "virtualmachine/%s %s\n", res.VM.Metadata.Name, res.Action)
				return nil
			}
			if res != nil {
				// stored, but spec.running could not be reached
				return err
			}
		}
		if !errors.Is(err, vm.ErrInvalid) {
			keep = true
			return fmt.Errorf("%w (your file is kept: %s)", err, path)
		}
		// reopen with the errors on top, as kubectl edit does
		fmt.Fprintf(r.errOut, "the edit is not valid: %v\nreopening the editor\n", err)
		var hdr strings.Builder
		hdr.WriteString("# The edit could not be applied:\n")
		for _, l := range strings.Split(strings.TrimRight(err.Error(), "\n"), "\n") {
			hdr.WriteString("#   " + l + "\n")
		}
		hdr.WriteString("#\n")
		if err := os.WriteFile(path, append([]byte(hdr.String()+editHeader), body...), 0o600); err != nil {
			return fmt.Errorf("vm %q: edit: %w", v.Metadata.Name, err)
		}
	}
}

func runEditor(ctx context.Context, r editRun, path string) error {
	c := exec.CommandContext(ctx, r.editor[0], append(r.editor[1:], path)...)
	c.Stdin, c.Stdout, c.Stderr = r.in, r.out, r.errOut
	if err := c.Run(); err != nil {
		return fmt.Errorf("editor %s: %w", r.editor[0], err)
	}
	return nil
}

func marshalEdit(v *vm.VirtualMachine) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(editManifest{v.APIVersion, v.Kind, v.Metadata, v.Spec}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// diffSpec is the edited spec as the diff shows it: user data typed into
// the editor is a secret too, so the diff says only that it changed.
func diffSpec(s vm.Spec) vm.Spec {
	if ci := s.CloudInit; ci != nil && ci.UserData != "" && ci.UserData != redact.Mask {
		c := *ci
		c.UserData = redact.Mask + " (changed)"
		s.CloudInit = &c
	}
	return s
}

func specYAML(s vm.Spec) string {
	b, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("# %v\n", err)
	}
	return string(b)
}

// decodeEdit reads the edited manifest through the same decoder as
// `virt apply -f`. It stays the VM that was opened: the UID may not be
// changed (Apply would update whatever VM it names), and a missing one
// is the opened VM's.
func decodeEdit(body []byte, opened *vm.VirtualMachine) (*vm.VirtualMachine, error) {
	in, err := vm.Decode(body)
	if err != nil {
		return nil, err
	}
	switch in.Metadata.UID {
	case "":
		in.Metadata.UID = opened.Metadata.UID
	case opened.Metadata.UID:
	default:
		return nil, fmt.Errorf("%w: metadata.uid: %q: the VM's identity cannot be edited (want %s)", vm.ErrInvalid, in.Metadata.UID, opened.Metadata.UID)
	}
	return in, nil
}

// stripComments drops the lines that start with # (the header and the
// errors vm edit wrote, and any the user added).
func stripComments(b []byte) []byte {
	var out bytes.Buffer
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasPrefix(bytes.TrimLeft(l, " \t"), []byte("#")) {
			continue
		}
		out.Write(l)
	}
	return out.Bytes()
}

// safeFileName keeps a VM name's file-safe characters for the temp file.
func safeFileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, filepath.Base(name))
}

// editorArgv is the editor to run: $VISUAL, else $EDITOR, split into
// words; else the first of vi, editor and nano on $PATH.
func editorArgv(getenv func(string) string, lookPath func(string) (string, error)) ([]string, error) {
	for _, v := range []string{"VISUAL", "EDITOR"} {
		s := getenv(v)
		if strings.TrimSpace(s) == "" {
			continue
		}
		argv, err := shellWords(s)
		if err != nil {
			return nil, &UsageError{fmt.Errorf("$%s: %w", v, err)}
		}
		return argv, nil
	}
	for _, name := range []string{"vi", "editor", "nano"} {
		if p, err := lookPath(name); err == nil {
			return []string{p}, nil
		}
	}
	return nil, errors.New("vm edit: no editor: set $EDITOR (none of vi, editor, nano is installed)")
}

// shellWords splits s into words as a POSIX shell does for a simple
// command, without expansions: blanks separate words, '…' quotes
// literally, "…" quotes with \ escaping " \ $ ` and newline, and \
// outside quotes escapes the next character.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\\':
			inWord = true
			if i+1 >= len(s) {
				return nil, errors.New("ends with a lone backslash")
			}
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
			}
		case c == '\'':
			inWord = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated ' quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inWord = true
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`unterminated " quote`)
			}
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("no command")
	}
	return words, nil
}

// unifiedDiff is a unified diff of a and b by lines, 3 lines of context,
// "" when they are equal. Manifests are short: the LCS table is cheap.
func unifiedDiff(aName, bName, a, b string) string {
	if a == b {
		return ""
	}
	x, y := splitLines(a), splitLines(b)
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-', '+'
		line string
		ai   int // line numbers (0-based) in a and b before this op
		bi   int
	}
	var ops []op
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			ops = append(ops, op{' ', x[i], i, j})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', x[i], i, j})
			i++
		default:
			ops = append(ops, op{'+', y[j], i, j})
			j++
		}
	}
	const ctx = 3
	var changes []int
	for k, o := range ops {
		if o.kind != ' ' {
			changes = append(changes, k)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	for c := 0; c < len(changes); {
		first, last := changes[c], changes[c]
		for c++; c < len(changes) && changes[c]-last <= 2*ctx; c++ {
			last = changes[c]
		}
		start, end := max(first-ctx, 0), min(last+ctx+1, len(ops))
		var aLen, bLen int
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				aLen++
			}
			if o.kind != '-' {
				bLen++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(ops[start].ai, aLen), hunkRange(ops[start].bi, bLen))
		for _, o := range ops[start:end] {
			out.WriteByte(o.kind)
			out.WriteString(o.line)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
