package duration

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Parse reads "30", "1.5", "90s", "2m" or "1h30m"; never negative, never
// NaN or infinite.
func Parse(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(t, 64); err == nil && isPlainNumber(t) {
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return 0, fmt.Errorf("%q is not a duration (say 30, 30s, 2m or 1h30m)", s)
		case f < 0:
			return 0, fmt.Errorf("%q: must not be negative", s)
		case f > float64(math.MaxInt64)/float64(time.Second):
			return 0, fmt.Errorf("%q is too long", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (say 30, 30s, 2m or 1h30m)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q: must not be negative", s)
	}
	return d, nil
}

// isPlainNumber accepts digits with at most one '.', and a leading '-'
// (refused as negative later): no exponents, hex, NaN or Inf.
func isPlainNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || s == "." {
		return false
	}
	dot := false
	for _, c := range s {
		switch {
		case c == '.' && !dot:
			dot = true
		case c < '0' || c > '9':
			return false
		}
	}
	return true
}

// Value is a duration flag for the flag and pflag packages alike.
type Value struct{ D *time.Duration }

// NewValue sets *p to def and returns the flag value that writes it.
func NewValue(p *time.Duration, def time.Duration) Value {
	*p = def
	return Value{D: p}
}

func (v Value) String() string {
	if v.D == nil {
		return "0s"
	}
	return v.D.String()
}

// Type names the value in pflag's help.
func (v Value) Type() string { return "duration" }

// Set parses s with Parse.
func (v Value) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return err
	}
	*v.D = d
	return nil
}

// Duration is a duration in a config file or manifest: written as Go
// writes it ("90s", "1m30s"), read as Parse reads it (bare seconds too).
type Duration time.Duration

// D is the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes "90s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what Parse reads.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
