package hostinfo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// miscMajor is the character major of the kernel's misc devices, which
// /dev/net/tun, /dev/vhost-net and /dev/vhost-vsock all are.
const miscMajor = 10

// miscNode is a misc character device a check inspects: its node under
// dev/, its fixed minor (include/linux/miscdevice.h) and the module that
// registers it.
type miscNode struct {
	id      string
	rel     string // the node, relative to the host root
	minor   uint32
	module  string // as /proc/modules and /sys/module name it
	missing Status // status when it cannot be had
	hint    string
}

var miscNodes = []miscNode{
	{id: "dev.tun", rel: "dev/net/tun", minor: 200, module: "tun", missing: Fail,
		hint: "modprobe tun (bridged and NAT VM NICs need TAP devices)"},
	{id: "dev.vhost-net", rel: "dev/vhost-net", minor: 238, module: "vhost_net", missing: Warn,
		hint: "modprobe vhost_net (without it virtio-net runs in QEMU's userspace, slower)"},
	{id: "dev.vhost-vsock", rel: "dev/vhost-vsock", minor: 241, module: "vhost_vsock", missing: Warn,
		hint: "modprobe vhost_vsock (needed only for host<->guest vsock channels)"},
}

// devNode judges a misc device without opening it: opening a node whose
// module is not loaded makes the kernel load it (misc_open asks for
// char-major-10-<minor>), and the module announces itself on the console,
// over whatever the DCUI drew there. Inspection changes nothing, so this
// stats the node, reads /proc/misc (is the minor registered?),
// /proc/modules and /sys/module (is the module loaded?) and the module
// index of the running kernel (would an open load it?), and asks access(2)
// (which opens nothing) whether the effective uid may use it.
func (k *checker) devNode(n miscNode) Check {
	c := Check{ID: n.id}
	p := k.h.path(n.rel)
	fi, err := os.Stat(p)
	if err != nil {
		if isPermission(err) && k.needsRoot() {
			c.Status, c.Detail = Unknown, "needs root: cannot stat "+p
			return c
		}
		c.Status, c.Detail, c.Hint = n.missing, p+" does not exist", n.hint
		return c
	}
	node := fmt.Sprintf("%s (char %d:%d)", p, miscMajor, n.minor)
	switch {
	case fi.Mode()&fs.ModeCharDevice != 0:
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			maj, min := unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))
			if maj != miscMajor || min != n.minor {
				c.Status = n.missing
				c.Detail = fmt.Sprintf("%s is char %d:%d; want %d:%d (the %s device)", p, maj, min, miscMajor, n.minor, n.module)
				c.Hint = "recreate it: rm " + p + "; mknod -m 0666 " + p + fmt.Sprintf(" c %d %d", miscMajor, n.minor) + ", or reboot (devtmpfs makes it)"
				return c
			}
		}
	case !k.h.live() && fi.Mode().IsRegular():
		// a fixture tree's stand-in: git stores no device nodes
		node = p
	default:
		c.Status, c.Detail = n.missing, fmt.Sprintf("%s is not a character device (%s)", p, fi.Mode().Type())
		c.Hint = n.hint
		return c
	}
	if k.h.live() && k.needsRoot() {
		if err := unix.Access(p, unix.R_OK|unix.W_OK); errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			c.Status, c.Detail = Unknown, fmt.Sprintf("needs root: %s is not accessible to uid %d", p, k.euid)
			return c
		}
	}

	misc, err := k.h.readString("proc/misc")
	if err != nil {
		c.Status, c.Detail = Unknown, node+" exists but the registered misc devices are unreadable: "+err.Error()
		return c
	}
	if name, ok := miscName(misc, n.minor); ok {
		c.Status, c.Detail = Pass, node+" registered as "+name
		return c
	}
	loaded, err := k.moduleLoaded(n.module)
	if err != nil {
		c.Status, c.Detail = Unknown, node+" exists; whether "+n.module+" is loaded is unreadable: "+err.Error()
		return c
	}
	if loaded {
		c.Status = n.missing
		c.Detail = fmt.Sprintf("%s exists and %s is loaded, but misc minor %d is not registered (%s)", node, n.module, n.minor, k.h.path("proc/misc"))
		c.Hint = "check dmesg for " + n.module + " errors; rmmod " + n.module + " && modprobe " + n.module
		return c
	}
	how, whyNot, err := k.loadsOnOpen(n)
	switch {
	case err != nil:
		c.Status = Unknown
		c.Detail = node + " exists; module " + n.module + " not loaded, and whether it loads on first use is unknown: " + err.Error()
		c.Hint = n.hint
	case how != "":
		c.Status = Pass
		c.Detail = node + " exists; module " + n.module + " not loaded; loads on first use (" + how + ")"
	default:
		c.Status = n.missing
		c.Detail = node + " exists but module " + n.module + " is not loaded and will not load on first use: " + whyNot
		c.Hint = n.hint
	}
	return c
}

// miscName returns the name /proc/misc registers for minor ("%3d %s"
// lines).
func miscName(misc string, minor uint32) (string, bool) {
	for _, line := range strings.Split(misc, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			if m, err := strconv.ParseUint(f[0], 10, 32); err == nil && uint32(m) == minor {
				return f[1], true
			}
		}
	}
	return "", false
}

// moduleLoaded reports whether module is in the running kernel: listed in
// /proc/modules, or present under /sys/module (also built-in modules that
// have parameters). A kernel without module support has no /proc/modules;
// what it has is built in, which /sys/module and /proc/misc show.
func (k *checker) moduleLoaded(module string) (bool, error) {
	if k.h.exists("sys/module/" + module) {
		return true, nil
	}
	mods, err := k.h.readString("proc/modules")
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(mods, "\n") {
		if name, _, _ := strings.Cut(line, " "); name == module {
			return true, nil
		}
	}
	return false, nil
}

// loadsOnOpen says how an open of the node would load n's module, or why
// it would not: the kernel asks modprobe for char-major-10-<minor>, which
// the running kernel's modules.alias must map to the module. Module
// loading must be on (kernel.modules_disabled 0) and the kernel must
// support it (/proc/modules exists).
func (k *checker) loadsOnOpen(n miscNode) (how, whyNot string, err error) {
	if !k.h.exists("proc/modules") {
		return "", "the kernel has no module support (no " + k.h.path("proc/modules") + ")", nil
	}
	if v, err := k.h.readString("proc/sys/kernel/modules_disabled"); err == nil && v == "1" {
		return "", "module loading is disabled (kernel.modules_disabled=1)", nil
	}
	rel, err := k.h.readString("proc/sys/kernel/osrelease")
	if err != nil {
		return "", "", fmt.Errorf("kernel release: %w", err)
	}
	dir := "lib/modules/" + rel
	aliases, err := k.h.readString(dir + "/modules.alias")
	if errors.Is(err, fs.ErrNotExist) {
		return "", "no module index " + k.h.path(dir+"/modules.alias") + " for the running kernel " + rel, nil
	}
	if err != nil {
		return "", "", err
	}
	want := fmt.Sprintf("char-major-%d-%d", miscMajor, n.minor)
	for _, line := range strings.Split(aliases, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "alias" && f[1] == want && strings.ReplaceAll(f[2], "-", "_") == n.module {
			return k.h.path(dir+"/modules.alias") + " maps " + want + " to it", "", nil
		}
	}
	return "", "no alias " + want + " in " + k.h.path(dir+"/modules.alias") + " (the module is not installed for kernel " + rel + ")", nil
}
