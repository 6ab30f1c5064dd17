package cli

import (
	"time"

	"github.com/spf13/pflag"
	"github.com/virtcon/virtcon/internal/duration"
)

// parseSeconds is duration.Parse: "30" is 30s, as Incus and Proxmox users
// type; never negative.
func parseSeconds(s string) (time.Duration, error) { return duration.Parse(s) }

// durationFlag defines a duration flag that accepts bare seconds.
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	fs.Var(duration.NewValue(p, value), name, usage+" (a duration: 30, 30s, 2m)")
}
