package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// seconds is a duration flag that also takes bare seconds ("30" is 30s),
// as Incus and Proxmox users type, and refuses negative values.
type seconds time.Duration

func (d *seconds) String() string { return time.Duration(*d).String() }
func (d *seconds) Type() string   { return "duration" }

func (d *seconds) Set(s string) error {
	v, err := parseSeconds(s)
	if err != nil {
		return err
	}
	*d = seconds(v)
	return nil
}

// parseSeconds reads "30", "1.5", "90s", "2m" or "1h30m"; never negative.
func parseSeconds(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	var d time.Duration
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		if f > float64(1<<62)/float64(time.Second) {
			return 0, fmt.Errorf("%q is too long", s)
		}
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(t); err != nil {
		return 0, fmt.Errorf("%q is not a duration (say 30, 30s, 2m or 1h30m)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q: must not be negative", s)
	}
	return d, nil
}

// durationFlag defines a duration flag that accepts bare seconds.
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*seconds)(p), name, usage+" (a duration: 30, 30s, 2m)")
}
