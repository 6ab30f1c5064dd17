//go:build integration

package netcfg

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// testNS is a network namespace made for one test (the integration
// tests of this package share it).
type testNS struct{ h netns.NsHandle }

func newTestNS(t *testing.T) *testNS {
	t.Helper()
	ns := &testNS{}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread dies with this goroutine instead of
		// going back to the pool inside the namespace.
		runtime.LockOSThread()
		h, err := netns.New()
		if err != nil {
			errc <- fmt.Errorf("new netns: %w", err)
			return
		}
		ns.h = h
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.h.Close() })
	return ns
}

// run calls fn on a thread inside the namespace; processes fn starts are
// born in it.
func (ns *testNS) run(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, as above
		if err := netns.Set(ns.h); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (ns *testNS) must(t *testing.T, fn func() error) {
	t.Helper()
	if err := ns.run(fn); err != nil {
		t.Fatal(err)
	}
}
