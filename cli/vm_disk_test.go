package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// hotplugFake is the VM fake with the disk and NIC changes: it records
// each call; live says whether the VM "runs".
type hotplugFake struct {
	*fakeVMs
	live bool
}

var _ hotplugService = hotplugFake{}

func (f hotplugFake) res(dev string) *vm.HotplugResult {
	return &vm.HotplugResult{VM: "web", Device: dev, Live: f.live, Generation: 3, Took: 420 * time.Millisecond}
}

func (f hotplugFake) AddDisk(_ context.Context, ref string, o vm.DiskAddOptions) (*vm.HotplugResult, error) {
	if err := f.record("AddDisk", ref, fmt.Sprintf("name=%s size=%s image=%s", o.Name, o.Size, o.Image)); err != nil {
		return nil, err
	}
	return f.res(o.Name), nil
}

func (f hotplugFake) DetachDisk(_ context.Context, ref, disk string, o vm.DiskDetachOptions) (*vm.HotplugResult, error) {
	if err := f.record("DetachDisk", ref, disk, fmt.Sprintf("delete=%v timeout=%s", o.Delete, o.Timeout)); err != nil {
		return nil, err
	}
	return f.res(disk), nil
}

func (f hotplugFake) ResizeDisk(_ context.Context, ref, disk, size string) (*vm.HotplugResult, error) {
	if err := f.record("ResizeDisk", ref, disk, size); err != nil {
		return nil, err
	}
	r := f.res(disk)
	r.Size = 40 << 30
	return r, nil
}

func (f hotplugFake) AddNIC(_ context.Context, ref string, o vm.NICAddOptions) (*vm.HotplugResult, error) {
	if err := f.record("AddNIC", ref, fmt.Sprintf("network=%s bridge=%s mac=%s model=%s", o.Network, o.Bridge, o.MAC, o.Model)); err != nil {
		return nil, err
	}
	return f.res("52:54:00:12:34:56"), nil
}

func (f hotplugFake) DetachNIC(_ context.Context, ref, nic string, o vm.NICDetachOptions) (*vm.HotplugResult, error) {
	if err := f.record("DetachNIC", ref, nic, fmt.Sprintf("timeout=%s", o.Timeout)); err != nil {
		return nil, err
	}
	return f.res(nic), nil
}

func TestVMDiskNIC(t *testing.T) {
	t.Parallel()
	shrink := errField("size", "1G", `is 1 GiB, smaller than disk "data"'s current 2 GiB: disks only grow`)
	paused := &vm.HotplugStateError{Name: "web", Op: "disk add", Phase: vm.PhasePaused}
	for _, tc := range []struct {
		name     string
		args     []string
		live     bool
		errs     map[string]error
		code     int
		out, err string
		call     string // "" for none
	}{
		{name: "add a blank disk, live", args: []string{"vm", "disk", "add", "web", "--size", "20G", "--name", "data"}, live: true,
			out: "web: disk data added (running VM, in 420ms; generation 3)\n", call: "AddDisk [web name=data size=20G image=]"},
		{name: "add an overlay, stopped", args: []string{"vm", "disk", "add", "web", "--image", "deb", "--name", "sys"},
			out: "web: disk sys added in the spec (stopped VM: from its next start; generation 3)\n", call: "AddDisk [web name=sys size= image=deb]"},
		{name: "add without size, image or name", args: []string{"vm", "disk", "add", "web"}, code: 2, err: "give --size, --image, or both"},
		{name: "add on a paused VM", args: []string{"vm", "disk", "add", "web", "--size", "1G"}, errs: map[string]error{"AddDisk": paused}, code: 1,
			err: "the VM is Paused: resume it first", call: "AddDisk [web name= size=1G image=]"},
		{name: "detach keeps the file", args: []string{"vm", "disk", "detach", "web", "data"}, live: true,
			out: "web: disk data detached (file kept) (running VM", call: "DetachDisk [web data delete=false timeout=30s]"},
		{name: "detach --delete --timeout", args: []string{"vm", "disk", "detach", "web", "data", "--delete", "--timeout", "5s"},
			out: "disk data detached and its file deleted", call: "DetachDisk [web data delete=true timeout=5s]"},
		{name: "detach with a zero timeout", args: []string{"vm", "disk", "detach", "web", "data", "--timeout", "0s"}, code: 2, err: "--timeout 0s: must be more than 0"},
		{name: "resize", args: []string{"vm", "disk", "resize", "web", "data", "40G"}, live: true,
			out: "web: disk data is 40 GiB (running VM", call: "ResizeDisk [web data 40G]"},
		{name: "shrink refused", args: []string{"vm", "disk", "resize", "web", "data", "1G"}, errs: map[string]error{"ResizeDisk": shrink}, code: 2,
			err: "smaller than disk", call: "ResizeDisk [web data 1G]"},
		{name: "resize without a size", args: []string{"vm", "disk", "resize", "web", "data"}, code: 2, err: "accepts 3 arg(s)"},
		{name: "nic add on a network", args: []string{"vm", "nic", "add", "web", "--network", "default"}, live: true,
			out: "web: NIC 52:54:00:12:34:56 added (running VM", call: "AddNIC [web network=default bridge= mac= model=virtio]"},
		{name: "nic add on a bridge, e1000", args: []string{"vm", "nic", "add", "web", "--bridge", "br0", "--mac", "52:54:00:aa:bb:cc", "--model", "e1000"},
			out: "added in the spec", call: "AddNIC [web network= bridge=br0 mac=52:54:00:aa:bb:cc model=e1000]"},
		{name: "nic add with both", args: []string{"vm", "nic", "add", "web", "--network", "a", "--bridge", "b"}, code: 2, err: "exactly one of --network or --bridge"},
		{name: "nic add with neither", args: []string{"vm", "nic", "add", "web"}, code: 2, err: "exactly one of --network or --bridge"},
		{name: "nic detach by index", args: []string{"vm", "nic", "detach", "web", "1"}, live: true,
			out: "web: NIC 1 detached (running VM", call: "DetachNIC [web 1 timeout=30s]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := hotplugFake{newFakeVMs(), tc.live}
			for k, v := range tc.errs {
				f.errs[k] = v
			}
			var out, errOut bytes.Buffer
			env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, vmSvc: f}
			code := runEnv(context.Background(), append([]string{"--root", t.TempDir()}, tc.args...), env)
			if env.host != nil {
				t.Errorf("virt %s built the host's services: it went around the hot-plug service", strings.Join(tc.args, " "))
			}
			if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errOut.String(), tc.err) {
				t.Errorf("virt %s: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout with %q, stderr with %q", strings.Join(tc.args, " "), code, out.String(), errOut.String(), tc.code, tc.out, tc.err)
			}
			var got string
			for _, c := range f.calls {
				got = fmt.Sprintf("%s %v", c.Method, c.Args)
			}
			if got != tc.call {
				t.Errorf("call: got %q; want %q", got, tc.call)
			}
		})
	}
}
