package directorcli

import (
	"fmt"
	"io"
	"time"

	"github.com/virtcon/virtcon/internal/output"
)

func validFormat(f string) error {
	switch f {
	case output.Table, output.JSON, output.YAML:
		return nil
	}
	return &UsageError{fmt.Errorf("--output: unknown format %q (want table, json or yaml)", f)}
}

// render writes data in the chosen format; table draws the human view.
func render(w io.Writer, format string, data any, table func(w io.Writer) error) error {
	return output.Render(w, format, data, table)
}

// clock is what a table's times are printed against: "ago" columns count
// from now, dates are in loc.
type clock struct {
	now time.Time
	loc *time.Location
}

func (e *Env) clock() clock { return clock{now: e.now(), loc: e.loc()} }

// msTime is a unix-ms time from the API; 0 is "none".
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// rfc3339 is t for JSON and YAML: RFC 3339 in UTC, to the second; nil
// when t is unset.
func rfc3339(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339)
	return &s
}

// stamp is t in the table: a date and time in the clock's zone, "-"
// when unset.
func (c clock) stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(c.loc).Format("2006-01-02 15:04:05")
}

// date is t to the day in the clock's zone, "-" when unset.
func (c clock) date(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(c.loc).Format("2006-01-02")
}

// ago is how long before now t was ("45s ago"), "-" when unset; a t in
// the future (another clock) is "just now".
func (c clock) ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := c.now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return short(d) + " ago"
}

// in is how long after now t is ("in 59m"), or ago when it has passed.
func (c clock) in(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(c.now)
	if d < 0 {
		return "expired " + c.ago(t)
	}
	return "in " + short(d)
}

// short is d in its largest two units: 45s, 3m20s, 2h5m, 3d4h.
func short(d time.Duration) string {
	d = d.Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		m, s := int(d/time.Minute), int(d%time.Minute/time.Second)
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days, h := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour)
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
