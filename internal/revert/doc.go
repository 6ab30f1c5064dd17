// Package revert undoes half-done multi-step host changes: each step that
// succeeds pushes its undo; on failure the undos run in reverse order, and
// on success Success() discards them.
//
// It knows nothing of what a step changes: the undos are the callers',
// each runs once, and their errors are returned, never retried or
// dropped.
package revert
