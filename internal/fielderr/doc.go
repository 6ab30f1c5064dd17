// Package fielderr is virtcon's one admission error: each problem names
// the offending field and value (a FieldError), and one error carries
// every problem found (a ValidationError), so a single run shows them all.
// vm and netcfg use these types (as vm.FieldError, netcfg.ValidationError,
// …), each with its own kind of bad input (NewKind); every one of them is
// errors.Is ErrInvalid, which a face maps once: the CLI to exit 2, the
// agent to InvalidArgument.
//
// It knows no face: a field is named as the core names it (the
// document's path, spec.disks[0].size), never as a CLI flag, and it
// imports no other virtcon package.
package fielderr
