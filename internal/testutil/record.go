package testutil

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// Recorded is what a check did to the testing.TB Record gave it.
type Recorded struct {
	// Errors are the messages of every Error, Errorf, Fatal and Fatalf,
	// in order.
	Errors []string
	// Fatal is whether the check stopped the test (Fatal, Fatalf or
	// FailNow).
	Fatal bool
	// Skip is the skip message; Skipped whether the check skipped.
	Skip    string
	Skipped bool
}

// Record runs check with a testing.TB that records failures and skips
// instead of acting on t, so a test can say what a check reports. The
// check runs in a goroutine of its own, so that Fatal and Skip can stop
// it; everything else (Name, TempDir, Cleanup, Output, Log) is t's.
func Record(t testing.TB, check func(testing.TB)) Recorded {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec
}

type recorder struct {
	testing.TB
	mu     sync.Mutex
	rec    Recorded
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) Error(args ...any) { r.record(fmt.Sprint(args...)) }

func (r *recorder) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }

func (r *recorder) Fatal(args ...any) { r.record(fmt.Sprint(args...)); r.FailNow() }

func (r *recorder) Fatalf(format string, args ...any) {
	r.record(fmt.Sprintf(format, args...))
	r.FailNow()
}

func (r *recorder) FailNow() {
	r.mu.Lock()
	r.failed, r.rec.Fatal = true, true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Skip(args ...any) { r.skip(fmt.Sprint(args...)) }

func (r *recorder) Skipf(format string, args ...any) { r.skip(fmt.Sprintf(format, args...)) }

func (r *recorder) SkipNow() { r.skip("") }

func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec.Skipped
}

func (r *recorder) record(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.rec.Errors = append(r.rec.Errors, msg)
}

func (r *recorder) skip(msg string) {
	r.mu.Lock()
	r.rec.Skipped, r.rec.Skip = true, msg
	r.mu.Unlock()
	runtime.Goexit()
}
