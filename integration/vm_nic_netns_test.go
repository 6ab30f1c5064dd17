//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/netcfg"
)

// A live NIC change asked from another network namespace than the VM's
// QEMU's is refused, naming both, and changes nothing: a detach run from
// the host's namespace said "detached" (exit 0) and left the TAP on its
// bridge in the VM's. Both directions: a VM in a namespace changed from
// the host's and from a third one; a VM in the host's changed from a
// namespace. In its own namespace the same detach works, and its TAP goes.
func TestIntegrationVMNICOtherNetns(t *testing.T) {
	g := requireGuest(t)
	ns, third := netns(t), netns(t)
	root := vmRoot(t)
	const br = "vcbr7"
	for _, args := range [][]string{{"link", "add", br, "type", "bridge"}, {"link", "set", br, "up"}} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
		}
	}
	manifest := func(name, network string) string {
		mf := filepath.Join(root, name+".yaml")
		os.WriteFile(mf, []byte(fmt.Sprintf(`apiVersion: virtcon/v1
kind: VirtualMachine
metadata: {name: %s}
spec:
  running: true
  memoryMiB: 256
  boot: {kernel: %s, initrd: %s, cmdline: console=ttyS0 quiet}
%s`, name, g.kernel, g.initrd, network)), 0o600)
		return mf
	}
	vns(t, ns, root, "apply", "-f", manifest("nn", "  network: [{bridge: "+br+"}, {bridge: "+br+"}]\n"))
	uid := showVM(t, ns, root, "nn").Metadata.UID
	tapRE := regexp.MustCompile(`: (vc[0-9a-f]{9,})[:@].* master ` + br + ` `)
	taps := func() []string {
		links, _ := exec.Command("ip", "-n", ns, "-o", "link", "show").Output()
		var out []string
		for _, m := range tapRE.FindAllSubmatch(links, -1) {
			out = append(out, string(m[1]))
		}
		return out
	}
	wantTAPs := []string{netcfg.TAPName(uid, 0), netcfg.TAPName(uid, 1)}
	if got := taps(); strings.Join(got, " ") != strings.Join(wantTAPs, " ") {
		t.Fatalf("TAPs on %s: %v; want %v", br, got, wantTAPs)
	}

	refused := func(r result, what, want string) {
		t.Helper()
		if r.code == 0 || !strings.Contains(r.stderr, "not in the network namespace of the VM's QEMU") || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: exit %d, stderr %q; want refused naming %q", what, r.code, r.stderr, want)
		}
		if !strings.Contains(r.stderr, "nothing changed") {
			t.Errorf("%s: stderr %q; want it to say nothing changed", what, r.stderr)
		}
	}
	hint := "ip netns exec " + ns + " virt vm nic"
	refused(virt(t, nil, "--root", root, "vm", "nic", "detach", "nn", "0"), "detach from the host's namespace", hint)
	refused(virt(t, nil, "--root", root, "vm", "nic", "add", "nn", "--bridge", br), "add from the host's namespace", hint)
	refused(virtIn(t, third, "--root", root, "vm", "nic", "detach", "nn", "1"), "detach from a third namespace", "(ip netns "+third+")")
	if got := taps(); strings.Join(got, " ") != strings.Join(wantTAPs, " ") {
		t.Errorf("TAPs on %s after the refused changes: %v; want %v", br, got, wantTAPs)
	}
	if got := showVM(t, ns, root, "nn"); len(got.Spec.Network) != 2 {
		t.Errorf("spec after the refused changes: %+v; want both NICs", got.Spec.Network)
	}

	// a VM in the host's namespace (user-mode networking) from a namespace
	v(t, root, "apply", "-f", manifest("hn", ""))
	hostNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	refused(virtIn(t, ns, "--root", root, "vm", "nic", "add", "hn", "--bridge", br), "add from a namespace to a VM in the host's", "its TAPs in "+hostNS)
	if got := showVM(t, "", root, "hn"); len(got.Spec.Network) != 0 {
		t.Errorf("spec of hn after the refused add: %+v; want no NIC", got.Spec.Network)
	}
	if got := taps(); len(got) != 2 {
		t.Errorf("TAPs on %s after the refused add: %v; want nn's two", br, got)
	}

	// in its own namespace the detach works once the guest can answer it
	waitLog(t, root, uid, "VIRTCON-GUEST-READY", 120*time.Second)
	vns(t, ns, root, "vm", "nic", "detach", "nn", "0")
	if got := taps(); len(got) != 1 || got[0] != netcfg.TAPName(uid, 0) {
		t.Errorf("TAPs on %s after the detach in its namespace: %v; want [%s] (NIC 1's, renamed)", br, got, netcfg.TAPName(uid, 0))
	}
	// ended from the host's namespace, the VM's TAP goes from its QEMU's
	// namespace (it stayed on the bridge, and the next start made another)
	v(t, root, "vm", "kill", "nn")
	v(t, root, "vm", "kill", "hn")
	if got := taps(); len(got) != 0 {
		t.Errorf("TAPs left in %s after the VM was killed from the host's namespace: %v", ns, got)
	}
}
