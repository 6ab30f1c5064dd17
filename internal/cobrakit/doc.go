// Package cobrakit is the cobra plumbing virt's and virt-director's
// command lines share: usage errors for unknown subcommands and wrong
// argument counts, the completion command, and the generated Markdown
// reference (gen-docs). It is face-side: only the CLIs (cli,
// directorcli) import it, and it holds no command of either.
package cobrakit
