package yamlcheck

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type level string

func (l *level) UnmarshalText(b []byte) error {
	if string(b) == "loud" {
		return fmt.Errorf("%q is not a level", b)
	}
	*l = level(b)
	return nil
}

type doc struct {
	Name   string            `yaml:"name"`
	Count  int               `yaml:"count"`
	On     bool              `yaml:"on"`
	Items  []item            `yaml:"items"`
	Labels map[string]string `yaml:"labels"`
	When   *time.Time        `yaml:"when"`
	Level  level             `yaml:"level"`
	Cloud  *cloud            `yaml:"cloudInit"`
}

type item struct {
	Size string `yaml:"size"`
}

type cloud struct {
	UserData string `yaml:"userData"`
}

func problems(t *testing.T, src string) []string {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	var out []string
	for _, p := range Check(&n, reflect.TypeFor[doc]()) {
		out = append(out, fmt.Sprintf("%s|%v|%s", p.Field, p.Value, p.Msg))
	}
	return out
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src string
		want      []string
	}{
		{"fine", "name: a\ncount: 2\non: true\nitems: [{size: 1G}]\nlabels: {a: b}\nwhen: 2026-01-02T03:04:05Z\nlevel: warn\n", nil},
		{"unknown field", "nmae: a\n", []string{"nmae|<nil>|unknown field"}},
		{"case typo", "Name: a\n", []string{`Name|<nil>|unknown field (did you mean "name"?)`}},
		{"nested unknown", "items: [{size: 1G, bus: sata}]\n", []string{"items[0].bus|<nil>|unknown field"}},
		{"wrong scalar", "count: many\n", []string{"count|many|must be an integer"}},
		{"a value its type refuses, by its path", "level: loud\n", []string{`level|<nil>|"loud" is not a level`}},
		{"YAML 1.1 boolean", "on: yes\n", []string{"on|yes|must be true or false"}},
		{"list for a string", "name: [a]\n", []string{"name|a list|must be a string"}},
		{"string for a list", "items: lots\n", []string{"items|a string|must be a list"}},
		{"map value", "labels: {a: [1]}\n", []string{"labels[a]|a list|must be a string"}},
		{"long value cut", "count: " + strings.Repeat("x", 100) + "\n", []string{"count|" + strings.Repeat("x", 32) + "…|must be an integer"}},
		{"self-reading type", "level: [not, text]\n", nil},
		{"merge list", "base: &b {name: a}\nextra: &e {count: 1}\n", []string{"base|<nil>|unknown field", "extra|<nil>|unknown field"}},
		{"not a mapping", "- a\n", []string{"(document)|a list|must be a mapping"}},
		{"null is fine", "name: ~\nitems: ~\n", nil},
	}
	for _, tt := range tests {
		got := problems(t, tt.src)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %q; want %q", tt.name, got, tt.want)
		}
	}
}

// A value that does not fit is never repeated when it may hold a secret:
// cloud-init user data in the wrong place is a whole cloud-config.
func TestCheckHidesSecrets(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"cloudInit: \"#cloud-config\\npassword: hunter2\"\n",
		"cloudInit: {userData: [\"password: hunter2\"]}\n",
	} {
		got := problems(t, src)
		if len(got) != 1 || strings.Contains(strings.Join(got, ""), "hunter2") {
			t.Errorf("%q: got %q; want one problem that does not repeat the value", src, got)
		}
	}
}

func TestMergeList(t *testing.T) {
	t.Parallel()
	// <<: [*a, *b] merges two mappings; a bad key in either is found
	src := "x: &a {name: a}\ny: &b {bad: 1}\n"
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	m := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!merge", Value: "<<"},
		{Kind: yaml.SequenceNode, Content: []*yaml.Node{n.Content[0].Content[1], n.Content[0].Content[3]}},
	}}
	got := Check(m, reflect.TypeFor[doc]())
	if len(got) != 1 || got[0].Field != "bad" {
		t.Errorf("merge list: got %+v; want one unknown field bad", got)
	}
}

func TestDocument(t *testing.T) {
	for _, tt := range []struct{ in, err string }{
		{"a: 1\n", ""},
		{"a: 1\n---\n", ""}, // a trailing empty document
		{"", "empty file"},
		{" \n\t\n", "empty file"},
		{"# only a comment\n", "empty file (only comments)"},
		{"a: [1\n", "line 1: did not find expected ',' or ']'"},
		{"a: 1\n---\nb: 2\n", "more than one document"},
	} {
		doc, err := Document([]byte(tt.in), "file")
		switch {
		case tt.err == "" && (err != nil || doc == nil):
			t.Errorf("%q: %v; want one document", tt.in, err)
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("%q: %v; want %q", tt.in, err, tt.err)
		}
	}
	if _, err := Document([]byte("a: 1\n---\nb: 2\n"), "file"); !errors.Is(err, ErrMoreDocuments) {
		t.Errorf("a second document: %v; want ErrMoreDocuments", err)
	}
}

// A syntax error names the line that is bad, not the line of its context
// (yaml.v3 names that, 0-based for a parser's error: one line early).
func TestSyntaxMessageLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     string
	}{
		{"a sequence entry in a mapping", "a: 1\nb: 2\n- c\n", "line 3: did not find expected key"},
		{"a key indented less", "a: 1\nb:\n  x: 1\n y: 2\n", "line 4: did not find expected key"},
		{"a tab", "a: 1\nb: 2\n\tc: 1\n", "line 3: found a tab character that violates indentation"},
		{"a key without a colon", "a: 1\nb: 2\nc\n", "line 3: could not find expected ':'"},
		{"a second colon", "a: 1\nb: 2\nc: d: e\n", "line 3: mapping values are not allowed in this context"},
		{"an unclosed flow mapping", "a: 1\nb: 2\nc: {x\n", "line 3: did not find expected ',' or '}'"},
		{"in a stored spec, line 9", "# header\napiVersion: virtcon/v1\nkind: VirtualMachine\nmetadata:\n  name: a\nspec:\n  cpus: 1\n  disks:\n  - name: a\n   size: 1G\n", "line 10: did not find expected key"},
		{"no line", "a: *x\n", "unknown anchor 'x' referenced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var n yaml.Node
			err := yaml.Unmarshal([]byte(tt.in), &n)
			if err == nil {
				t.Fatalf("yaml.Unmarshal(%q): got nil; want an error", tt.in)
			}
			if got := SyntaxMessage([]byte(tt.in), err); got != tt.want {
				t.Errorf("SyntaxMessage(%q, %v): got %q; want %q", tt.in, err, got, tt.want)
			}
			if _, err := Document([]byte(tt.in), "file"); err == nil || err.Error() != tt.want {
				t.Errorf("Document(%q): got %v; want %q", tt.in, err, tt.want)
			}
		})
	}
}
