package yamlcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
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
		return nil, errors.New(SyntaxMessage(data, err))
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

// lineRE is yaml.v3's syntax error: "line N: problem".
var lineRE = regexp.MustCompile(`^line ([0-9]+): (.*)$`)

// SyntaxMessage is Message of err, an error parsing data, with the line
// where data stops parsing. yaml.v3 names the line of the problem's
// context, not its own, and 0-based for a parser's error: a bad line 9
// after a mapping that began on line 9 reads "line 8". The line named is
// never after the bad one, so the first prefix of data from there on that
// fails with the same problem ends at the bad line.
func SyntaxMessage(data []byte, err error) string {
	msg := Message(err)
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	named, _ := strconv.Atoi(m[1])
	problem := m[2]
	lines := bytes.SplitAfter(data, []byte("\n"))
	end := 0
	for i := 0; i < len(lines); i++ {
		end += len(lines[i])
		if i+1 < named {
			continue
		}
		var n yaml.Node
		perr := yaml.Unmarshal(data[:end], &n)
		if perr == nil {
			continue
		}
		if pm := lineRE.FindStringSubmatch(Message(perr)); pm != nil && pm[2] == problem {
			return fmt.Sprintf("line %d: %s", i+1, problem)
		}
	}
	return msg
}
