// Package testutil holds the helpers virtcon's tests share, so that each
// exists once: RequireRoot and RequireCommand (skip, saying what is
// missing), Logger (a test's logger, written to the test's own output),
// Golden (a result against testdata/<test name>.golden, rewritten with
// -update), Buffer (a buffer one goroutine writes while another reads),
// WaitForText (poll until a text shows), AllocatedBytes (what a file
// takes on disk), RepoRoot, and Record (run a check against a recording
// testing.TB, to test the checks themselves). The fake host inventories
// and fixture host trees are in the subpackage fakehost, which imports
// hostinfo; this package imports no virtcon package, so every package's
// tests can use it.
//
// It is a normal package only so that tests in any package can import it:
// only _test.go files and other test-helper packages (fakehost,
// internal/pamtest, tui/tuitest) import it, never a program's code; the
// layering test in package host holds that. It never changes the host.
package testutil
