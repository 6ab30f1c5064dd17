package agent

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/fielderr"
)

const goodPin = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestDecodeConfig(t *testing.T) {
	t.Parallel()
	good := "apiVersion: virtcon/v1\nkind: AgentConfig\ndirector: director.example:9443\npin: " + goodPin + "\nnodeID: " + testNodeID + "\n"
	tests := []struct {
		name, in string
		wantErr  string // "" = valid
	}{
		{"valid", good, ""},
		{"valid ipv6", strings.Replace(good, "director.example:9443", "'[2001:db8::1]:9443'", 1), ""},
		{"unknown field", good + "token: abc\n", "token: unknown field"},
		{"wrong kind", strings.Replace(good, "AgentConfig", "HostPolicy", 1), `kind: want AgentConfig (got "HostPolicy")`},
		{"wrong version", strings.Replace(good, "virtcon/v1", "virtcon/v2", 1), "apiVersion"},
		{"director without port", strings.Replace(good, "director.example:9443", "director.example", 1), "director: must be host:port (an IPv6 host in brackets) (got \"director.example\")"},
		{"bad pin", strings.Replace(good, goodPin, "sha256:XYZ", 1), "pin"},
		{"bad node id", strings.Replace(good, testNodeID, "node-1", 1), "nodeID"},
		{"node id a number", strings.Replace(good, testNodeID, "12", 1), "nodeID"},
		{"directors", good + "directors: [d2.example:9443, '[2001:db8::2]:9443']\n", ""},
		{"director list entry without port", good + "directors: [d2.example:9443, d3.example]\n", `directors[1]: must be host:port (an IPv6 host in brackets) (got "d3.example")`},
		{"directors not a list", good + "directors: d2.example:9443\n", "directors"},
		{"empty", "", "empty file"},
		{"two documents", good + "---\n" + good, "more than one document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := DecodeConfig([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeConfig: %v", err)
				}
				if c.NodeID != testNodeID || c.Pin != goodPin {
					t.Errorf("decoded %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("DecodeConfig: %v; want an error containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, fielderr.ErrInvalid) {
				t.Errorf("error %v is not ErrInvalidConfig and fielderr.ErrInvalid", err)
			}
		})
	}
}

func TestConfigRoundTrip(t *testing.T) {
	t.Parallel()
	c := &Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Director: "[2001:db8::1]:9443", Pin: goodPin, NodeID: testNodeID,
		Directors: []string{"10.0.0.2:9443", "[2001:db8::2]:9443"}}
	b, err := MarshalConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeConfig(b)
	if err != nil {
		t.Fatalf("DecodeConfig(MarshalConfig): %v\n%s", err, b)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip: got %+v; want %+v", got, c)
	}
	if got.Host() != "2001:db8::1" {
		t.Errorf("Host() = %q; want 2001:db8::1", got.Host())
	}
}
