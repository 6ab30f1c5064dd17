package yamlcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrMoreDocuments is a file holding a second document: each of virtcon's
// files (a manifest, network.yaml, host.yaml) holds exactly one.
var ErrMoreDocuments = errors.New("more than one document")

// Document parses data as exactly one YAML (or JSON) document; a trailing
// empty one ("---" at the end) is harmless and common. Its errors say
// what is wrong in words a caller prefixes with its own kind: "empty
// NOUN", "empty NOUN (only comments)", YAML's own message without its
// "yaml: ", or ErrMoreDocuments.
func Document(data []byte, noun string) (*yaml.Node, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("empty %s", noun)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("empty %s (only comments)", noun)
	} else if err != nil {
		return nil, errors.New(Message(err))
	}
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			return &doc, nil
		}
		if err != nil || !IsNull(&extra) {
			return nil, ErrMoreDocuments
		}
	}
}

// Message is a YAML error's text without its "yaml: " prefix.
func Message(err error) string { return strings.TrimPrefix(err.Error(), "yaml: ") }
