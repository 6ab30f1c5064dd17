package cli

import (
	"context"
	"io"
	"time"

	"github.com/virtcon/virtcon/vm"
)

// vmService is what the VM and image commands ask of the core's VM
// manager: exactly the *vm.Manager methods they call. Tests put a fake
// behind it (Env.vmSvc) to drive the commands without QEMU.
type vmService interface {
	// manifests and listing
	Create(ctx context.Context, v *vm.VirtualMachine) (*vm.VirtualMachine, error)
	Apply(ctx context.Context, in *vm.VirtualMachine) (*vm.ApplyResult, error)
	List(ctx context.Context) ([]vm.Entry, error)
	Get(ctx context.Context, ref string) (*vm.VirtualMachine, *vm.Entry, error)
	Peek(ctx context.Context, ref string) (*vm.Entry, error)
	NICs(ctx context.Context, v *vm.VirtualMachine) []vm.NICStatus
	GC(ctx context.Context, dryRun bool) ([]vm.Orphan, error)

	// lifecycle
	StartWith(ctx context.Context, ref string, opts vm.StartOptions) error
	PowerOff(ctx context.Context, ref string, opts vm.StopOptions) (vm.StopResult, error)
	Kill(ctx context.Context, ref string) error
	Reboot(ctx context.Context, ref string) error
	Pause(ctx context.Context, ref string) error
	Resume(ctx context.Context, ref string) error
	Delete(ctx context.Context, ref string, force bool) error
	SaveWith(ctx context.Context, ref string, o vm.SaveOptions) (*vm.SaveResult, error)
	SetAutostart(ctx context.Context, ref string, on bool, order int, delay time.Duration) error

	// the guest's streams and addresses
	Console(ctx context.Context, ref string, in io.Reader, out io.Writer, attached func(v *vm.VirtualMachine)) error
	Logs(ctx context.Context, ref string, w io.Writer, follow bool) error
	IP(ctx context.Context, ref string) ([]vm.Address, error)

	// images
	EnsureImage(ctx context.Context, ref string, progress vm.ProgressFunc) (name string, pulled *vm.Image, err error)
	PullImage(ctx context.Context, url, name, wantSHA string, progress vm.ProgressFunc) (*vm.Image, error)
	ImportImage(ctx context.Context, file, name string) (*vm.Image, error)
	ListImages(ctx context.Context) ([]vm.Image, error)
	RemoveImage(ctx context.Context, name string) error
}

var _ vmService = (*vm.Manager)(nil)

// vms is the VM service the commands use: the fake a test set, else the
// host's VM manager.
func (e *Env) vms() vmService {
	if e.vmSvc != nil {
		return e.vmSvc
	}
	return e.Host().VMs
}
