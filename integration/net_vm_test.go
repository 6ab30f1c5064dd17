//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/internal/testutil"
	"github.com/virtcon/virtcon/vm"
)

// netns makes a network namespace for one test and deletes it (with every
// process and link in it) at the end.
func netns(t *testing.T) string {
	t.Helper()
	testutil.RequireCommand(t, "ip", "apt-get install iproute2; the tests make their namespaces with it")
	name := fmt.Sprintf("vcit%d", time.Now().UnixNano()%1e9)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	exec.Command("ip", "-n", name, "link", "set", "lo", "up").Run()
	t.Cleanup(func() {
		// processes in the namespace (QEMU, dnsmasq) go first
		out, _ := exec.Command("ip", "netns", "pids", name).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
			}
		}
		exec.Command("ip", "netns", "del", name).Run()
	})
	return name
}

// vns runs virt inside a namespace and fails the test on a non-zero exit.
func vns(t *testing.T, ns, root string, args ...string) string {
	t.Helper()
	r := virtIn(t, ns, append([]string{"--root", root}, args...)...)
	if r.code != 0 {
		t.Fatalf("virt %s (in netns %s): exit %d\nstderr: %s", strings.Join(args, " "), ns, r.code, r.stderr)
	}
	return r.stdout
}

// A guest on a NAT network gets a DHCP lease from our dnsmasq and pings the
// bridge; two guests on the bridge ping each other.
func TestIntegrationNetNATGuests(t *testing.T) {
	g := requireGuest(t)
	ns := netns(t)
	root := vmRoot(t)
	cfg := filepath.Join(root, "net.yaml")
	os.WriteFile(cfg, []byte(`apiVersion: virtcon/v1
kind: HostNetwork
networks:
  - name: default
    type: nat
    bridge: vcnat0
    subnet: 10.77.0.0/24
`), 0o600)
	vns(t, ns, root, "net", "apply", "-f", cfg)
	for _, name := range []string{"n1", "n2"} {
		manifest := fmt.Sprintf(`apiVersion: virtcon/v1
kind: VirtualMachine
metadata: {name: %s}
spec:
  running: true
  memoryMiB: 256
  boot: {kernel: %s, initrd: %s, cmdline: console=ttyS0 quiet}
  network: [{network: default}]
`, name, g.kernel, g.initrd)
		mf := filepath.Join(root, name+".yaml")
		os.WriteFile(mf, []byte(manifest), 0o600)
		vns(t, ns, root, "apply", "-f", mf)
	}
	ips := map[string]string{}
	ipRE := regexp.MustCompile(`VIRTCON-IP=(10\.77\.0\.[0-9]+)`)
	for _, name := range []string{"n1", "n2"} {
		var m vm.VirtualMachine
		json.Unmarshal([]byte(vns(t, ns, root, "vm", "show", name, "-o", "json")), &m)
		waitLog(t, root, m.Metadata.UID, "VIRTCON-IP=10.77.0.", 120*time.Second)
		ips[name] = ipRE.FindStringSubmatch(serialLog(root, m.Metadata.UID))[1]
		t.Logf("%s got %s by DHCP from our dnsmasq", name, ips[name])
	}
	if ips["n1"] == ips["n2"] {
		t.Fatalf("both guests got %s", ips["n1"])
	}
	// the lease is what `virt vm ip` reports
	if out := vns(t, ns, root, "vm", "ip", "n1"); !strings.Contains(out, ips["n1"]) {
		t.Errorf("virt vm ip n1 = %q; want %s", out, ips["n1"])
	}
	out := consoleRun(t, ns, root, "n1", "ping -c 2 -W 2 10.77.0.1 && echo PING-BRIDGE-OK", "PING-BRIDGE-OK", 30*time.Second)
	if !strings.Contains(out, "PING-BRIDGE-OK") {
		t.Errorf("n1 could not ping the bridge: %q", out)
	}
	out = consoleRun(t, ns, root, "n2", "ping -c 2 -W 2 "+ips["n1"]+" && echo PING-PEER-OK", "PING-PEER-OK", 30*time.Second)
	if !strings.Contains(out, "PING-PEER-OK") {
		t.Errorf("n2 could not ping n1 at %s: %q", ips["n1"], out)
	}
	tapRE := regexp.MustCompile(`: (vc[0-9a-f]{9,})[:@].* master vcnat0 `)
	links, _ := exec.Command("ip", "-n", ns, "-o", "link", "show").Output()
	if n := len(tapRE.FindAllSubmatch(links, -1)); n != 2 {
		t.Errorf("%d TAPs on vcnat0 while the VMs run; want 2:\n%s", n, links)
	}
	// stopping the VMs removes their TAPs
	for _, name := range []string{"n1", "n2"} {
		vns(t, ns, root, "vm", "kill", name)
	}
	links, _ = exec.Command("ip", "-n", ns, "-o", "link", "show").Output()
	if tapRE.Match(links) {
		t.Errorf("TAPs left after the VMs stopped:\n%s", links)
	}
}

// consoleRun types a command on a VM's serial console and returns what it printed.
func consoleRun(t *testing.T, ns, root, name, command, want string, timeout time.Duration) string {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, virtBin, "--root", root, "vm", "console", name)
	in, _ := cmd.StdinPipe()
	var out testutil.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	fmt.Fprintf(in, "\n%s\n", command)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && !strings.Contains(out.String(), want) {
		time.Sleep(100 * time.Millisecond)
	}
	in.Write([]byte{vm.DetachKey})
	cmd.Wait()
	return out.String()
}
