package director

import (
	"testing"
	"time"

	"github.com/virtcon/virtcon/director/ca"
)

// The serving certificate is re-made once two thirds of its life have
// passed, and kept before that.
func TestServingCertRenewal(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	kek := make([]byte, 32)
	a, _, err := ca.Create(now, kek)
	if err != nil {
		t.Fatal(err)
	}
	var s servingCert
	if err := s.init(a, []string{"dir.example"}, clock); err != nil {
		t.Fatal(err)
	}
	first, _ := s.get()
	if err := first.Leaf.VerifyHostname("dir.example"); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	life := first.Leaf.NotAfter.Sub(first.Leaf.NotBefore)
	now = first.Leaf.NotBefore.Add(life*2/3 - time.Minute)
	if c, _ := s.get(); c != first {
		t.Errorf("re-made before two thirds of its life")
	}
	now = first.Leaf.NotBefore.Add(life*2/3 + time.Minute)
	c, err := s.get()
	if err != nil || c == first || !c.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Errorf("after two thirds: got the same certificate (err %v), want a new one", err)
	}
}
