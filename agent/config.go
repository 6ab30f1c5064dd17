package agent

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/internal/yamlcheck"
)

// The agent's config file, AgentDir/agent.yaml: written by enrolment,
// read by every other command.
const (
	ConfigAPIVersion = "virtcon/v1"
	ConfigKind       = "AgentConfig"
)

// Config is agent.yaml: which director the host enrolled with, the pin of
// that director's root CA, and the node id it was given. The CA itself is
// ca.pem; the key and certificate identity.pem.
type Config struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"`
	// Director is host:port (an IPv6 host in brackets), as the join
	// string had it; the director's certificate must be valid for host.
	Director string `json:"director" yaml:"director"`
	// Pin is sha256:<hex> of the director's root CA public key.
	Pin string `json:"pin" yaml:"pin"`
	// NodeID is the node's id, the UUID in its certificate's URI SAN.
	NodeID string `json:"nodeID" yaml:"nodeID"`
	// Directors are more host:port addresses of the same director (its
	// replicas, as the director names them: Registered and Directors
	// messages). The agent tries them and Director in turn; optional.
	Directors []string `json:"directors,omitempty" yaml:"directors,omitempty"`
}

// Addrs is every director address to try: Director first, then the
// others, each once.
func (c *Config) Addrs() []string {
	out := []string{c.Director}
	seen := map[string]bool{c.Director: true}
	for _, a := range c.Directors {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// validAddr is the rule for director addresses: host:port, an IPv6 host
// in brackets.
func validAddr(a string) bool {
	h, p, err := net.SplitHostPort(a)
	return err == nil && h != "" && p != ""
}

// Host is the director's host name or address without port or brackets.
func (c *Config) Host() string {
	h, _, err := net.SplitHostPort(c.Director)
	if err != nil {
		return c.Director
	}
	return h
}

const configHeader = `# The node agent's enrolment (virt agent enroll wrote it; virt agent leave
# removes it). The key and certificate are identity.pem, the director's CA
# ca.pem, both next to this file.
`

// MarshalConfig writes c as agent.yaml.
func MarshalConfig(c *Config) ([]byte, error) {
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	return append([]byte(configHeader), b...), nil
}

// DecodeConfig reads and admits agent.yaml: unknown fields and values of
// the wrong type refused by their path, then every value checked. Errors
// wrap ErrInvalidConfig (and fielderr.ErrInvalid).
func DecodeConfig(data []byte) (*Config, error) {
	doc, err := yamlcheck.Document(data, "file")
	if errors.Is(err, yamlcheck.ErrMoreDocuments) {
		return nil, fmt.Errorf("%w: %v; a host enrols with one director", ErrInvalidConfig, err)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	var errs []*fielderr.FieldError
	for _, pr := range yamlcheck.Check(doc, reflect.TypeFor[Config]()) {
		errs = append(errs, &fielderr.FieldError{Field: pr.Field, Value: pr.Value, Msg: pr.Msg})
	}
	if len(errs) > 0 {
		return nil, fielderr.New(ErrInvalidConfig, errs...)
	}
	var c Config
	if err := doc.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, yamlcheck.Message(err))
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) validate() error {
	var errs []*fielderr.FieldError
	add := func(field string, v any, msg string) {
		errs = append(errs, &fielderr.FieldError{Field: field, Value: v, Msg: msg})
	}
	if c.APIVersion != ConfigAPIVersion {
		add("apiVersion", c.APIVersion, "want "+ConfigAPIVersion)
	}
	if c.Kind != ConfigKind {
		add("kind", c.Kind, "want "+ConfigKind)
	}
	if !validAddr(c.Director) {
		add("director", c.Director, "must be host:port (an IPv6 host in brackets)")
	}
	for i, a := range c.Directors {
		if !validAddr(a) {
			add(fmt.Sprintf("directors[%d]", i), a, "must be host:port (an IPv6 host in brackets)")
		}
	}
	if !validPin(c.Pin) {
		add("pin", c.Pin, "must be sha256: and 64 lowercase hex digits")
	}
	if !enroll.ValidNodeID(c.NodeID) {
		add("nodeID", c.NodeID, "must be a lowercase UUID")
	}
	if len(errs) > 0 {
		return fielderr.New(ErrInvalidConfig, errs...)
	}
	return nil
}

func validPin(pin string) bool {
	hex, ok := strings.CutPrefix(pin, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
