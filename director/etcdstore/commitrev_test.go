package etcdstore

import "testing"

// CommitRev's revision is the ModRevision of what the transaction put
// (Get returns it); a stale condition writes nothing.
func TestCommitRev(t *testing.T) {
	s, err := Open(t.Context(), Options{DataDir: tempDir(t), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ok, rev, err := s.Txn().IfAbsent("k").Put("k", map[string]int{"v": 1}, 0).CommitRev(t.Context())
	if err != nil || !ok || rev == 0 {
		t.Fatalf("CommitRev: %v %d %v, want ok and a revision", ok, rev, err)
	}
	got, err := s.Get(t.Context(), "k", nil)
	if err != nil || got != rev {
		t.Fatalf("Get: ModRevision %d (%v), want CommitRev's %d", got, err, rev)
	}
	ok, rev2, err := s.Txn().IfRev("k", rev).Put("k", map[string]int{"v": 2}, 0).CommitRev(t.Context())
	if err != nil || !ok || rev2 <= rev {
		t.Fatalf("second CommitRev: %v %d %v, want ok and a later revision than %d", ok, rev2, err, rev)
	}
	if ok, _, err := s.Txn().IfRev("k", rev).Delete("k").CommitRev(t.Context()); err != nil || ok {
		t.Fatalf("CommitRev on a stale revision: ok %v, err %v; want not ok", ok, err)
	}
}
