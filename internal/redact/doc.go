// Package redact removes secrets (passwords, tokens, keys, cloud-init user
// data) from structured data and text before it is logged or bundled.
//
// It only rewrites the values it is handed: it logs, keeps and writes
// nothing.
package redact
