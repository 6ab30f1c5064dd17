// Package diag writes the diagnostics bundle: a tar.gz of JSON documents
// (inventory, checks, versions and, as they arrive, VM and network state)
// with every secret redacted. It gathers what it can; a part that fails is
// listed in errors.json rather than failing the whole bundle. HostParts is
// the one list of parts, so `virt diagnostics` and the DCUI's Diagnostics
// screen write the same bundle.
//
// It only reads the host; the one file it writes is the bundle (0600,
// atomically; WriteInDir's directory 0700). It never puts a secret in a
// bundle or a log, and imports neither cobra nor Bubble Tea.
package diag
