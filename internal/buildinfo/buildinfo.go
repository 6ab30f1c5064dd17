package buildinfo

import "runtime/debug"

// Version and Commit are set with -ldflags "-X github.com/virtcon/virtcon/internal/buildinfo.Version=…".
var (
	Version = "dev"
	Commit  = ""
)

// Info is what `virt version` prints.
type Info struct {
	Version   string `json:"version" yaml:"version"`
	Commit    string `json:"commit,omitempty" yaml:"commit,omitempty"`
	GoVersion string `json:"goVersion" yaml:"goVersion"`
}

// Get returns the build information, filling the commit from the VCS stamp when not set.
func Get() Info {
	i := Info{Version: Version, Commit: Commit}
	if bi, ok := debug.ReadBuildInfo(); ok {
		i.GoVersion = bi.GoVersion
		if i.Commit == "" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					i.Commit = s.Value
				}
			}
		}
	}
	return i
}
