package enroll

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"
)

const testNode = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"

func TestNodeIDFromCert(t *testing.T) {
	uri := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	tests := []struct {
		name string
		uris []*url.URL
		want string // "" = refused
	}{
		{"node uri", []*url.URL{uri(NodeURI(testNode))}, testNode},
		{"none", nil, ""},
		{"two", []*url.URL{uri(NodeURI(testNode)), uri(NodeURI("00000000-0000-4000-8000-000000000000"))}, ""},
		{"other scheme", []*url.URL{uri("spiffe://virtcon/" + testNode)}, ""},
		{"urn but not uuid", []*url.URL{uri("urn:isbn:0451450523")}, ""},
		{"upper-case uuid", []*url.URL{uri(NodeURI(strings.ToUpper(testNode)))}, ""},
		{"short uuid", []*url.URL{uri(NodeURI(testNode[:35]))}, ""},
		{"no hyphens", []*url.URL{uri(NodeURI(strings.ReplaceAll(testNode, "-", "")))}, ""},
		{"hyphen misplaced", []*url.URL{uri(NodeURI("6f1c2a3b4-d5e-4f60-8a7b-9c0d1e2f3a4b"))}, ""},
		{"not hex", []*url.URL{uri(NodeURI("6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4g"))}, ""},
		{"fragment", []*url.URL{uri(NodeURI(testNode) + "#x")}, ""},
		{"query", []*url.URL{uri(NodeURI(testNode) + "?x=1")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert := &x509.Certificate{Subject: pkix.Name{CommonName: testNode}, URIs: tt.uris}
			got, err := NodeIDFromCert(cert)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("got node %q; want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNewNodeID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id, err := NewNodeID()
		if err != nil {
			t.Fatal(err)
		}
		if !ValidNodeID(id) || id[14] != '4' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("NewNodeID = %q; want a lowercase version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("NewNodeID repeated %q", id)
		}
		seen[id] = true
		u, err := url.Parse(NodeURI(id))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := NodeIDFromCert(&x509.Certificate{URIs: []*url.URL{u}}); err != nil || got != id {
			t.Fatalf("NodeIDFromCert(NodeURI(%q)) = %q, %v", id, got, err)
		}
	}
}
