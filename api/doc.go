// Package api holds the director's protobuf definitions
// (virtcon/director/v1/*.proto) and the Go code generated from them in
// directorv1 and directorv1/directorv1connect. The generated files are
// committed and never edited: `make proto` regenerates them, and
// TestGeneratedCodeIsFresh fails when they are stale.
package api
