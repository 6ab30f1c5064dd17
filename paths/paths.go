package paths

import (
	"os"
	"path/filepath"
)

// EnvRoot names the environment variable that relocates the root.
const EnvRoot = "VIRTCON_ROOT"

// Layout is the set of directories virtcon uses under Root.
type Layout struct {
	Root string
}

// New returns the layout under root; an empty root means "/".
func New(root string) Layout {
	if root == "" {
		root = "/"
	}
	return Layout{Root: filepath.Clean(root)}
}

// FromEnv returns the layout under $VIRTCON_ROOT, or "/".
func FromEnv() Layout { return New(os.Getenv(EnvRoot)) }

func (l Layout) join(p ...string) string {
	return filepath.Join(append([]string{l.Root}, p...)...)
}

// ConfigDir holds configuration and credentials (secrets 0600, dirs 0700).
func (l Layout) ConfigDir() string { return l.join("etc", "virtcon") }

// StateDir holds persistent state: VM specs, disks, images, network config.
func (l Layout) StateDir() string { return l.join("var", "lib", "virtcon") }

// RunDir holds runtime files that vanish on reboot: sockets, pidfiles, locks, caches keyed by boot.
func (l Layout) RunDir() string { return l.join("run", "virtcon") }

// LogDir holds virtcon's logs and the per-VM serial logs.
func (l Layout) LogDir() string { return l.join("var", "log", "virtcon") }

// VMStateDir is the persistent directory of one VM.
func (l Layout) VMStateDir(uid string) string { return filepath.Join(l.StateDir(), "vms", uid) }

// VMRunDir is the runtime directory of one VM.
func (l Layout) VMRunDir(uid string) string { return filepath.Join(l.RunDir(), "vms", uid) }

// ImagesDir holds base images and their sha256 markers.
func (l Layout) ImagesDir() string { return filepath.Join(l.StateDir(), "images") }

// NetworkDir holds the applied and pending network configuration.
func (l Layout) NetworkDir() string { return filepath.Join(l.StateDir(), "network") }

// AccelCacheFile is the per-boot cache of the acceleration verdict.
func (l Layout) AccelCacheFile() string { return filepath.Join(l.RunDir(), "acceleration.json") }

// WebtermRecordFile is the runtime record of the running web terminal
// (listen address, URLs, certificate fingerprint, pid): the status screen
// shows its URLs only while the record's process is alive.
func (l Layout) WebtermRecordFile() string { return filepath.Join(l.RunDir(), "webterm.json") }

// AgentDir holds the node agent's credentials from enrolment into a
// director: its private key, certificate and the director's CA chain
// (key 0600, dir 0700).
func (l Layout) AgentDir() string { return filepath.Join(l.ConfigDir(), "agent") }

// AgentStateDir holds the node agent's persistent state that is not a
// credential (the director's address and node id it enrolled with).
func (l Layout) AgentStateDir() string { return filepath.Join(l.StateDir(), "agent") }

// AgentRecordFile is the runtime record of the running node agent (pid,
// director, node id, session state), read by status commands.
func (l Layout) AgentRecordFile() string { return filepath.Join(l.RunDir(), "agent.json") }

// AgentLockFile is held by the running node agent, so that a second agent
// on the same host refuses to start.
func (l Layout) AgentLockFile() string { return filepath.Join(l.RunDir(), "agent.lock") }
