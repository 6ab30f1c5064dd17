package netcfg

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Decode reads exactly one network.yaml document, YAML or JSON (JSON is
// YAML), rejecting unknown fields and values of the wrong type by their
// path (bridges[0].mtu). It checks apiVersion and kind; Validate checks
// the rest. Every error wraps ErrInvalid.
func Decode(data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: empty file", ErrInvalid)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: empty file (only comments)", ErrInvalid)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yamlMsg(err))
	}
	// A trailing "---" opens an empty document: harmless, and common.
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || !isNull(&extra) {
			return nil, fmt.Errorf("%w: more than one document; a host has one network configuration", ErrInvalid)
		}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	var errs []*FieldError
	checkNode(root, reflect.TypeFor[Config](), "", &errs)
	if len(errs) > 0 {
		return nil, &ValidationError{errs}
	}
	var cfg Config
	if err := root.Decode(&cfg); err != nil {
		// checkNode catches the type errors first; this is a backstop.
		return nil, fmt.Errorf("%w: %s", ErrInvalid, yamlMsg(err))
	}
	if cfg.APIVersion != APIVersion {
		errs = append(errs, &FieldError{"apiVersion", cfg.APIVersion, "want " + APIVersion})
	}
	if cfg.Kind != Kind {
		errs = append(errs, &FieldError{"kind", cfg.Kind, "want " + Kind})
	}
	if len(errs) > 0 {
		return nil, &ValidationError{errs}
	}
	return &cfg, nil
}

func yamlMsg(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

func isNull(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode {
		return len(n.Content) == 0 || isNull(n.Content[0])
	}
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// checkNode walks the document against the Go type so that an unknown
// field or a value of the wrong kind is reported with its full path, which
// yaml's own errors (a line number and a Go type name) do not give.
func checkNode(n *yaml.Node, t reflect.Type, path string, errs *[]*FieldError) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if isNull(n) {
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
		*errs = append(*errs, &FieldError{field, v, "must be " + want})
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad("a mapping")
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				checkNode(v, t, path, errs)
				continue
			}
			sub := k.Value
			if path != "" {
				sub = path + "." + k.Value
			}
			f, ok := fields[k.Value]
			if !ok {
				*errs = append(*errs, &FieldError{sub, nil, "unknown field" + suggest(k.Value, fields)})
				continue
			}
			checkNode(v, f.Type, sub, errs)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			bad("a list")
			return
		}
		for i, c := range n.Content {
			checkNode(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			bad("a string")
		}
	case reflect.Int:
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
// (vlanfiltering for vlanFiltering).
func suggest(key string, fields map[string]reflect.StructField) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
	}
	return ""
}
