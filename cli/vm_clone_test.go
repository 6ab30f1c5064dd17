package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/vm"
)

// cloneFake is the VM fake with Clone: a clone of a known VM becomes an
// entry of its own (running with Start).
type cloneFake struct {
	*fakeVMs
}

var _ cloneService = cloneFake{}

const cloneUID = "9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"

func (f cloneFake) Clone(_ context.Context, src, name string, o vm.CloneOptions) (*vm.VirtualMachine, error) {
	if err := f.record("Clone", src, name, fmt.Sprintf("linked=%v start=%v", o.Linked, o.Start)); err != nil {
		return nil, err
	}
	s, err := f.lookup(src)
	if err != nil {
		return nil, err
	}
	e := vm.Entry{Name: name, UID: cloneUID, Class: vm.ClassManaged, Phase: vm.PhaseStopped, CPUs: s.CPUs, MemoryMiB: s.MemoryMiB}
	if o.Start {
		running(&e)
	}
	f.entries = append(f.entries, e)
	return &vm.VirtualMachine{Metadata: vm.Metadata{Name: name, UID: cloneUID}}, nil
}

// PeekVM is the fake's entry of the VM Clone returned.
func (f cloneFake) PeekVM(v *vm.VirtualMachine) *vm.Entry {
	e, err := f.lookup(v.Metadata.UID)
	if err != nil {
		return &vm.Entry{Name: v.Metadata.Name, UID: v.Metadata.UID}
	}
	c := *e
	return &c
}

func runCloneFake(t *testing.T, f cloneFake, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &Env{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, vmSvc: f}
	code := runEnv(context.Background(), append([]string{"--root", t.TempDir()}, args...), env)
	if env.host != nil {
		t.Errorf("virt %s built the host's services: it went around the clone service", strings.Join(args, " "))
	}
	return out.String(), errOut.String(), code
}

func TestVMClone(t *testing.T) {
	t.Parallel()
	taken := errField("metadata.name", "db", "taken by VM 1234 (names are unique regardless of case)")
	for _, tc := range []struct {
		name     string
		args     []string
		errs     map[string]error
		code     int
		out, err string // substrings of stdout and stderr
		call     string // the Clone call, "" for none
	}{
		{name: "full", args: []string{"vm", "clone", "web", "web-2"},
			out: "virtualmachine/web-2 cloned from web (full, uid " + cloneUID + ")\n", call: "Clone(web, web-2, linked=false start=false)"},
		{name: "linked and started", args: []string{"vm", "clone", "web", "web-2", "--linked", "--start"},
			out: "virtualmachine/web-2 cloned from web (linked, uid " + cloneUID + "), running as pid 4242 under tcg\n", call: "Clone(web, web-2, linked=true start=true)"},
		{name: "json", args: []string{"vm", "clone", "web", "web-2", "-o", "json"},
			out: `"uid": "` + cloneUID + `"`, call: "Clone(web, web-2, linked=false start=false)"},
		{name: "no such source", args: []string{"vm", "clone", "nope", "x"}, code: 1,
			err: `"nope"`, call: "Clone(nope, x, linked=false start=false)"},
		{name: "name in use", args: []string{"vm", "clone", "web", "db"}, errs: map[string]error{"Clone": taken}, code: 2,
			err: `metadata.name`, call: "Clone(web, db, linked=false start=false)"},
		{name: "one argument", args: []string{"vm", "clone", "web"}, code: 2, err: "accepts 2 arg(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := cloneFake{newFakeVMs()}
			for k, v := range tc.errs {
				f.errs[k] = v
			}
			out, errOut, code := runCloneFake(t, f, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.err) {
				t.Errorf("virt %s: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout with %q, stderr with %q", strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.out, tc.err)
			}
			var got string
			for _, c := range f.calls {
				if c.Method == "Clone" {
					got = fmt.Sprintf("Clone(%v, %v, %v)", c.Args...)
				}
			}
			if got != tc.call {
				t.Errorf("clone call: got %q; want %q", got, tc.call)
			}
			if strings.Contains(tc.out, "{") || tc.name == "json" {
				var e vm.Entry
				if err := json.Unmarshal([]byte(out), &e); err != nil || e.Name != "web-2" {
					t.Errorf("-o json: %v %+v", err, e)
				}
			}
		})
	}
}
