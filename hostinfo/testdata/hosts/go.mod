// The fixture trees keep sysfs names such as pci0000:00, and ':' may not
// appear in a Go module zip. This go.mod makes the directory a module of
// its own, which the zip of github.com/virtcon/virtcon leaves out, so the
// main module stays installable with `go install ...@version`. No Go code
// lives here.
module github.com/virtcon/virtcon/hostinfo/testdata/hosts

go 1.26
