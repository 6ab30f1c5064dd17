package yamlcheck

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/virtcon/virtcon/internal/redact"
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
		*out = append(*out, Problem{field, shown(n, t, path), "must be " + want})
	}
	if t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) {
		return // the type reads itself: its own errors say what is wrong
	}
	if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		// the type reads itself; a scalar it refuses (a duration) gets its
		// error, which names the value, under the field's path, which the
		// decoder's error would not give (time.Time is the decoder's own)
		if n.Kind == yaml.ScalarNode && t != timeType {
			if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
				*out = append(*out, Problem{field, nil, err.Error()})
			}
		}
		return
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
				if v.Kind == yaml.SequenceNode { // <<: [*a, *b]
					for _, m := range v.Content {
						check(m, t, path, out)
					}
				} else {
					check(v, t, path, out)
				}
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

var (
	unmarshaler     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	timeType        = reflect.TypeFor[time.Time]()
)

// maxShown bounds the value an error repeats: errors reach logs and
// terminals, and a value where a mapping belongs may be a whole document.
const maxShown = 32

// shown is the value a problem repeats: a scalar where a scalar belongs,
// cut to maxShown; otherwise only what the node is ("a string"). Nothing
// under a secret-named field (cloud-init user data, passwords) is shown.
func shown(n *yaml.Node, t reflect.Type, path string) any {
	scalarWanted := t.Kind() != reflect.Struct && t.Kind() != reflect.Map && t.Kind() != reflect.Slice
	if n.Kind != yaml.ScalarNode || !scalarWanted || secretPath(path) {
		return nodeKind(n)
	}
	v := n.Value
	if r := []rune(v); len(r) > maxShown {
		v = string(r[:maxShown]) + "…"
	}
	return v
}

// secretPath reports whether any element of a field path names a secret
// or sits under cloud-init, whose every field may carry one.
func secretPath(path string) bool {
	for _, el := range strings.FieldsFunc(path, func(r rune) bool { return r == '.' || r == '[' || r == ']' }) {
		if redact.IsSecretKey(el) || strings.EqualFold(el, "cloudInit") {
			return true
		}
	}
	return false
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!str":
		return "a string"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
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
