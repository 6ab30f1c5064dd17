// Package cobrakit is the cobra plumbing virt's and virt-director's
// command lines share: usage errors for unknown subcommands and wrong
// argument counts, the version and completion commands, and the generated Markdown
// reference (gen-docs). It is face-side: only the CLIs (cli,
// directorcli) import it, and it holds no command of either but the
// version, completion and gen-docs ones they share.
package cobrakit
