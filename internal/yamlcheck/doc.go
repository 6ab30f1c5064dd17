// Package yamlcheck walks a YAML document against the Go type it will be
// decoded into, so that an unknown field or a value of the wrong kind is
// reported by its full path (spec.disks[0].size), which yaml's own errors
// (a line number and a Go type name) do not give.
//
// It reports only; decoding, defaults and validation are its callers'.
// A value under a secret field (internal/redact's names) or under
// cloudInit is never quoted in a problem.
package yamlcheck
