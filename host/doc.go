// Package host is the composition root: it builds, from one layout and
// one host root, the services every face of virtcon calls (the CLI, the
// DCUI, the web terminal, the agent). A rule lives in the service that
// owns it; this package only wires them and holds no wording of a face.
// It imports neither cobra nor Bubble Tea.
//
// Its tests hold the module's layering (layering_test.go): the core
// imports no face and no UI library, the faces import each other nowhere,
// and no program links a test helper.
package host
