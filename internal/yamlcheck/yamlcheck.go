// Package yamlcheck walks a YAML document against the Go type it will be
// decoded into, so that an unknown field or a value of the wrong kind is
// reported by its full path (spec.disks[0].size), which yaml's own errors
// (a line number and a Go type name) do not give.
package yamlcheck

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Problem is one field that does not fit the type.
type Problem struct {
	Field string // the path, e.g. bridges[0].mtu; "(document)" for the root
	Value any    // the offending scalar, or what the node is ("a list"); nil for an unknown field
	Msg   string
}

// Check walks n against t and returns every problem found.
func Check(n *yaml.Node, t reflect.Type) []Problem {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	var out []Problem
	check(n, t, "", &out)
	return out
}

// IsNull reports whether n is an empty document or a null scalar.
func IsNull(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode {
		return len(n.Content) == 0 || IsNull(n.Content[0])
	}
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func check(n *yaml.Node, t reflect.Type, path string, out *[]Problem) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if IsNull(n) {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	field := path
	if field == "" {
		field = "(document)"
	}
	bad := func(want string) {
		var v any = n.Value
		if n.Kind != yaml.ScalarNode {
			v = nodeKind(n)
		}
		*out = append(*out, Problem{field, v, "must be " + want})
	}
	switch t.Kind() {
	case reflect.Struct:
		if t.PkgPath() == "time" && t.Name() == "Time" {
			if n.Kind != yaml.ScalarNode {
				bad("a timestamp")
			}
			return
		}
		if n.Kind != yaml.MappingNode {
			bad("a mapping")
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				check(v, t, path, out)
				continue
			}
			sub := k.Value
			if path != "" {
				sub = path + "." + k.Value
			}
			f, ok := fields[k.Value]
			if !ok {
				*out = append(*out, Problem{sub, nil, "unknown field" + suggest(k.Value, fields)})
				continue
			}
			check(v, f.Type, sub, out)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			bad("a mapping")
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			check(n.Content[i+1], t.Elem(), fmt.Sprintf("%s[%s]", path, n.Content[i].Value), out)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			bad("a list")
			return
		}
		for i, c := range n.Content {
			check(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			bad("a string")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			bad("an integer")
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			bad("true or false")
		}
	}
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a scalar"
}

func yamlFields(t reflect.Type) map[string]reflect.StructField {
	m := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f
	}
	return m
}

// suggest names the known field that differs only in case, the usual typo
// (vlanfiltering for vlanFiltering, memorymib for memoryMiB).
func suggest(key string, fields map[string]reflect.StructField) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
	}
	return ""
}
