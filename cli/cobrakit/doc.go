// Package cobrakit is the cobra plumbing virt's and virt-director's
// command lines share (cli and cli/directorcli): usage errors for unknown
// subcommands and wrong argument counts, the version and completion
// commands, and the generated Markdown reference (gen-docs). It is part
// of the cli face; the core never imports it.
package cobrakit
