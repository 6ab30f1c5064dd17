// Package fakehost holds the made-up hosts virtcon's tests look at: the
// inventories the DCUI's screens are drawn from (Inventory, FullInventory)
// and the captured host trees under hostinfo/testdata/hosts (Tree), with
// this boot's KVM verdict remembered for one (CacheVerdict) so that no
// test starts the real probe.
//
// It is a package apart from testutil because it imports hostinfo, which
// testutil must not (hostinfo's own tests use testutil). Only _test.go
// files import it. It reads the fixture trees and never changes them, nor
// anything on the live host.
package fakehost
