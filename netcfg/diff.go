package netcfg

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// DiffConfigs describes, one line per field, how new differs from old:
// "- management.addresses: 192.0.2.5/24" for what goes,
// "+ management.addresses: 192.0.2.6/24" for what comes, in file order.
// Lists of names or addresses are one line each; list entries with a name
// (bridges, VLANs, networks) are addressed by it (bridges[br0].stp), so a
// reordered list does not read as a rewrite. nil is an empty
// configuration. Equal configurations give no lines.
func DiffConfigs(old, new *Config) []string {
	return diffLines(flatten(old), flatten(new))
}

// flatten turns cfg into "path: value" lines through its YAML form, so a
// field added to the schema shows up without changes here.
func flatten(cfg *Config) []string {
	if cfg == nil {
		return nil
	}
	var n yaml.Node
	if err := n.Encode(cfg); err != nil {
		return []string{fmt.Sprintf("(unencodable configuration: %v)", err)}
	}
	var out []string
	flattenNode(&n, "", &out)
	return out
}

func flattenNode(n *yaml.Node, path string, out *[]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			flattenNode(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			flattenNode(v, sub, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			switch c.Kind {
			case yaml.MappingNode:
				key := fmt.Sprintf("%s[%d]", path, i)
				if name := mappingValue(c, "name"); name != "" {
					key = fmt.Sprintf("%s[%s]", path, name)
				}
				flattenNode(c, key, out)
			default:
				flattenNode(c, path, out)
			}
		}
	default:
		*out = append(*out, path+": "+n.Value)
	}
}

func mappingValue(n *yaml.Node, key string) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i+1].Kind == yaml.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

// diffLines is a longest-common-subsequence line diff: the lines only in a
// prefixed "- ", those only in b "+ ", in order, removals of a run before
// its additions. Configurations are tens of lines, so the quadratic table
// is small.
func diffLines(a, b []string) []string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out, adds []string
	flush := func() { out = append(out, adds...); adds = adds[:0] }
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			flush()
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			adds = append(adds, "+ "+b[j])
			j++
		default:
			out = append(out, "- "+a[i])
			i++
		}
	}
	flush()
	return out
}
