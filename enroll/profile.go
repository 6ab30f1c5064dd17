package enroll

import "time"

// The node certificate profile.
const (
	// CertLifetime is how long a node certificate is valid.
	CertLifetime = 30 * 24 * time.Hour
	// Backdate moves NotBefore into the past, so that a node whose clock
	// is a little behind the director's can use a fresh certificate.
	Backdate = 5 * time.Minute
	// RenewFrom and RenewTo bound the point of a certificate's life,
	// as a fraction, at which its agent renews it: a random point in
	// between, so that nodes enrolled together do not renew together.
	RenewFrom = 0.7
	RenewTo   = 0.9
)

// RenewAt is when to renew a certificate valid from notBefore to
// notAfter: at RenewFrom + r*(RenewTo-RenewFrom) of its life, r being a
// random number in [0,1) (clamped into [0,1]; NaN counts as 0).
func RenewAt(notBefore, notAfter time.Time, r float64) time.Time {
	if !(r > 0) { // also NaN
		r = 0
	}
	r = min(r, 1)
	life := notAfter.Sub(notBefore)
	return notBefore.Add(time.Duration(float64(life) * (RenewFrom + r*(RenewTo-RenewFrom))))
}
