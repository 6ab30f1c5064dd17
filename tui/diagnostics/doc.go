// Package diagnostics is the DCUI's Diagnostics screen: one action, write
// the support bundle (the same parts as `virt diagnostics`, from
// diag.HostParts) to <state>/diagnostics/ and show its path, size and
// parts, or the error verbatim.
//
// Writing only reads the host, so any logged-in admin may do it, a
// read-only console included; the file is root's (0600 in a 0700
// directory). The write runs in a tea.Cmd with a timeout through an
// injected Sources; the KVM probe verdict comes from the per-boot cache,
// never from a fresh probe. The bundle's content is diag's business, not
// this package's.
package diagnostics
