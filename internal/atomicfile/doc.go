// Package atomicfile writes files so that a reader sees either the old
// content or the new, never a torn write: temp file in the same directory,
// fsync, rename, fsync of the directory.
//
// It knows nothing of what it writes, and leaves no temp file behind
// when a write fails.
package atomicfile
