package redact

import (
	"encoding/json"
	"regexp"
	"strings"
)

// Mask replaces every redacted value.
const Mask = "[REDACTED]"

var secretKey = regexp.MustCompile(`(?i)(passw(or)?d|passwd|secret|token|user[-_]?data|private[-_]?key|api[-_]?key|credential|cookie|authorization|psk)`)

// IsSecretKey reports whether a field name holds a secret.
func IsSecretKey(name string) bool { return secretKey.MatchString(name) }

var pemBlock = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]+-----.*?-----END [A-Z0-9 ]+-----`)
var inlineSecret = regexp.MustCompile(`(?i)((?:passw(?:or)?d|secret|token|api[-_]?key|user[-_]?data)\s*[=:]\s*)("[^"]*"|'[^']*'|\S+)`)

// Text redacts PEM blocks and key=value / key: value secrets in free text.
func Text(s string) string {
	s = pemBlock.ReplaceAllString(s, Mask)
	return inlineSecret.ReplaceAllString(s, "${1}"+Mask)
}

// Value returns a JSON-shaped copy of v (through encoding/json) with every
// secret-named field masked and every string passed through Text.
func Value(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		return nil, err
	}
	return walk(generic), nil
}

func walk(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if IsSecretKey(k) && x != nil {
				t[k] = Mask
				continue
			}
			t[k] = walk(x)
		}
		return t
	case []any:
		for i := range t {
			t[i] = walk(t[i])
		}
		return t
	case string:
		if strings.Contains(t, "-----BEGIN") || strings.ContainsAny(t, "=:") {
			return Text(t)
		}
		return t
	}
	return v
}
