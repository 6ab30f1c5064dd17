package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/vm"
)

// The core's errors carry facts; the CLI words what to do in its own
// commands and flags, and keeps the cause reachable.
func TestWordError(t *testing.T) {
	tests := []struct {
		err    error
		want   string
		target error
	}{
		{fmt.Errorf("spec.disks[0].image: %w", &vm.ImageNotFoundError{Name: "deb"}), "(virt image pull URL --name deb, or virt image import FILE --name deb)", vm.ErrNotFound},
		{&vm.ImageExistsError{Name: "deb"}, "(virt image rm deb first)", vm.ErrExists},
		{&vm.ImageInUseError{Name: "deb", Disks: []string{"/x"}}, "(virt vm gc --dry-run lists them)", vm.ErrInUse},
		{&vm.RunningError{Name: "a", Op: "delete", PID: 7}, "stop it first or use --force", vm.ErrRunning},
		{&vm.SocketPathError{Path: "/long", Len: 120}, "use a shorter --root", nil},
		{fmt.Errorf("start: %w", &vm.UnknownNetworkError{Network: "lab"}), "(virt net show)", nil},
		{&vm.ScopeError{Name: "a", Unit: "virtcon-vm-u1.scope", Err: errors.New("no bus")}, "vm.scopes and systemctl status virtcon-vm-u1.scope", vm.ErrScope},
		{fielderr.New(vm.ErrInvalid, &fielderr.FieldError{Field: "spec.cloudInit.userData", Msg: "x", Kind: vm.ErrUserDataMask}), "virt vm show --show-secrets prints the user data", vm.ErrInvalid},
		{&vm.NetnsError{VM: "a", Op: "nic detach", PID: 7, Ours: vm.Netns{ID: "net:[1]", Host: true}, QEMU: vm.Netns{ID: "net:[2]", Name: "lab"}}, "(run it there: ip netns exec lab virt vm nic detach …)", vm.ErrOtherNetns},
		{&vm.NetnsError{VM: "a", Op: "nic add", PID: 7, Ours: vm.Netns{ID: "net:[2]", Name: "lab"}, QEMU: vm.Netns{ID: "net:[1]", Host: true}}, "(run it in the host's namespace, not under ip netns exec)", vm.ErrOtherNetns},
		{&vm.NetnsError{VM: "a", Op: "nic add", PID: 7, Ours: vm.Netns{ID: "net:[1]"}, QEMU: vm.Netns{ID: "net:[2]"}}, "(run it there: nsenter --net=/proc/7/ns/net virt vm nic add …)", vm.ErrOtherNetns},
	}
	for _, tt := range tests {
		got := wordError(tt.err)
		if !strings.HasPrefix(got.Error(), tt.err.Error()) || !strings.Contains(got.Error(), tt.want) {
			t.Errorf("wordError(%v) = %q; want the error and %q", tt.err, got, tt.want)
		}
		if tt.target != nil && !errors.Is(got, tt.target) {
			t.Errorf("wordError(%v): errors.Is(%v) lost", tt.err, tt.target)
		}
	}
	// a VM's users of an image need no gc hint; other errors pass unchanged
	inUse := &vm.ImageInUseError{Name: "deb", VMs: []string{"web"}}
	if got := wordError(inUse); got != error(inUse) {
		t.Errorf("wordError(in use by VMs) = %q; want it unchanged", got)
	}
	plain := errors.New("x")
	if wordError(plain) != plain || wordError(nil) != nil {
		t.Error("wordError changed an error it has no words for")
	}
}
