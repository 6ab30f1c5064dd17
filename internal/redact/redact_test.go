package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestValue(t *testing.T) {
	in := map[string]any{
		"name":     "web-01",
		"password": "hunter2",
		"spec": map[string]any{
			"cloudInit": map[string]any{"userData": "#cloud-config\nchpasswd: {list: root:pw}"},
			"cpus":      2,
		},
		"list":  []any{map[string]any{"token": "abc.def"}},
		"notes": "enrol with token=abc.def then go",
		"cert":  "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----",
	}
	out, err := Value(in)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	s := string(b)
	for _, secret := range []string{"hunter2", "chpasswd", "abc.def", "MIIE"} {
		if strings.Contains(s, secret) {
			t.Errorf("redacted output still contains %q: %s", secret, s)
		}
	}
	for _, keep := range []string{"web-01", `"cpus":2`} {
		if !strings.Contains(s, keep) {
			t.Errorf("redacted output lost %q: %s", keep, s)
		}
	}
}

func TestText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text", "plain text"},
		{"password=hunter2 user=bob", "password=" + Mask + " user=bob"},
		{`token: "a b c"`, "token: " + Mask},
	}
	for _, tc := range tests {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
