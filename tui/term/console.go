package term

import (
	"path"
	"strings"
)

// KernelConsoleFile lists the consoles the kernel prints its messages on
// ("tty0 ttyS0"; tty0 is whichever virtual terminal is in front).
const KernelConsoleFile = "sys/class/tty/console/active"

// IsKernelConsole reports whether the kernel prints its messages on the
// terminal tty ("ttyS0", "/dev/tty1"), given the contents of
// KernelConsoleFile: a serial or virtual terminal listed there, or a
// virtual terminal (tty1..tty63) when tty0 is listed. A pseudo-terminal
// (an SSH session, the web terminal) never is one.
func IsKernelConsole(active, tty string) bool {
	name := path.Base(tty)
	if name == "" || name == "." || name == "/" || strings.HasPrefix(tty, "pts/") || strings.Contains(tty, "/pts/") {
		return false
	}
	for _, c := range strings.Fields(active) {
		if c == name {
			return true
		}
		if c == "tty0" && isVT(name) {
			return true
		}
	}
	return false
}

// isVT reports whether name is a virtual terminal, tty1 to tty63.
func isVT(name string) bool {
	n, ok := strings.CutPrefix(name, "tty")
	if !ok || n == "" || len(n) > 2 || n[0] == '0' {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
