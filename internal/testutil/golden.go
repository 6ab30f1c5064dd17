package testutil

import (
	"testing"

	"github.com/charmbracelet/x/exp/golden"
)

// Golden compares out with the golden file testdata/<t.Name()>.golden
// (a subtest's name makes subdirectories: testdata/TestGolden/rich/list.golden)
// and fails t with the two and a diff where they differ; escape sequences
// are compared as written, shown quoted. Run the tests with -update to
// write out as the golden file instead, then read the diff before
// committing it.
//
// The work is charmbracelet/x/exp/golden's, which teatest uses too: it
// defines the -update flag, so a test binary that links both has one flag
// and one file layout.
func Golden[T []byte | string](t testing.TB, out T) {
	t.Helper()
	golden.RequireEqual(t, out)
}
