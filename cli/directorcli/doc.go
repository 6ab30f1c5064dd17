// Package directorcli is the `virt-director` command line: cobra commands
// that run the director (serve) and administer it over its admin socket
// (tokens, nodes, audit), their flags, output rendering (table, JSON,
// YAML) and exit codes.
//
// It is a face, like cli: the director's logic lives in package director,
// and this package reaches a running director only through the
// AdminService on <data>/admin.sock. The director's connect errors get
// their words here and their exit codes in the one switch of exitcode.go;
// data goes to stdout, status to stderr. A join token's secret is printed
// once, to stdout, by token create, and nowhere else.
package directorcli
