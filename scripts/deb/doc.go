// Command deb stages virtcon's Debian package for nfpm (`make deb`): the
// binaries the Makefile built, man pages generated from the cobra tree
// (virt(1), virt-vm(1), …) and dcui(8), the shell completions, the PAM
// service, the units with their programs in /usr/bin, the example
// configuration as conffiles, the maintainer scripts, and the nfpm
// configuration that names them all. nfpm then builds the .deb from it.
//
// It owns what goes where in the package; the maintainer scripts in
// packaging/deb own what an install and a purge do. It must not be
// imported, nor change anything outside its staging directory.
package main
