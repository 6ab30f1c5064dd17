package enroll

import (
	"math"
	"testing"
	"time"
)

func TestRenewAt(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-Backdate)
	na := nb.Add(CertLifetime)
	life := na.Sub(nb)
	at := func(f float64) time.Time { return nb.Add(time.Duration(f * float64(life))) }
	tests := []struct {
		name string
		r    float64
		want time.Time
	}{
		{"earliest", 0, at(0.7)},
		{"middle", 0.5, at(0.8)},
		{"latest", math.Nextafter(1, 0), at(0.9)},
		{"below 0 clamped", -3, at(0.7)},
		{"above 1 clamped", 7, at(0.9)},
		{"NaN as 0", math.NaN(), at(0.7)},
	}
	for _, tt := range tests {
		got := RenewAt(nb, na, tt.r)
		if d := got.Sub(tt.want).Abs(); d > time.Second {
			t.Errorf("%s: RenewAt(r=%v) = %v; want %v", tt.name, tt.r, got, tt.want)
		}
		if got.Before(at(RenewFrom)) || got.After(at(RenewTo)) {
			t.Errorf("%s: RenewAt(r=%v) = %v outside [%v, %v]", tt.name, tt.r, got, at(RenewFrom), at(RenewTo))
		}
	}
	// 30 days, so the window is day 21 to day 27 of the life.
	if got := RenewAt(nb, na, 0).Sub(nb); got != 21*24*time.Hour {
		t.Errorf("earliest renewal %v after NotBefore; want 21 days", got)
	}
}
