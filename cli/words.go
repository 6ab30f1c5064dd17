package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/virtcon/virtcon/internal/fielderr"
	"github.com/virtcon/virtcon/internal/redact"
	"github.com/virtcon/virtcon/vm"
)

// wordError adds to a core error what the CLI user can do about it, in
// the CLI's own commands and flags: the core's errors carry facts only.
// The cause stays reachable (errors.Is/As, and so the exit code).
func wordError(err error) error {
	var (
		notFound *vm.ImageNotFoundError
		exists   *vm.ImageExistsError
		inUse    *vm.ImageInUseError
		running  *vm.RunningError
		sock     *vm.SocketPathError
		network  *vm.UnknownNetworkError
		saved    *vm.SavedStateError
		scope    *vm.ScopeError
		netns    *vm.NetnsError
	)
	switch {
	case err == nil:
		return nil
	case hasFieldKind(err, vm.ErrUserDataMask):
		return fmt.Errorf("%w (virt vm show prints %s in its place; virt vm show --show-secrets prints the user data)", err, redact.Mask)
	case errors.As(err, &notFound):
		return fmt.Errorf("%w (virt image pull URL --name %s, or virt image import FILE --name %s)", err, notFound.Name, notFound.Name)
	case errors.As(err, &exists):
		return fmt.Errorf("%w (virt image rm %s first)", err, exists.Name)
	case errors.As(err, &inUse) && len(inUse.VMs) == 0:
		return fmt.Errorf("%w (virt vm gc --dry-run lists them)", err)
	case errors.As(err, &running) && running.Op == "delete":
		return fmt.Errorf("%w; stop it first or use --force", err)
	case errors.As(err, &sock):
		return fmt.Errorf("%w: use a shorter --root", err)
	case errors.As(err, &network):
		return fmt.Errorf("%w (virt net show)", err)
	case errors.As(err, &saved):
		return fmt.Errorf("%w; nothing was started: virt vm start --discard-saved %s boots it fresh, losing what it had in RAM", err, saved.Name)
	case errors.As(err, &netns) && netns.Err == nil:
		switch {
		case netns.QEMU.Name != "":
			return fmt.Errorf("%w (run it there: ip netns exec %s virt vm %s …)", err, netns.QEMU.Name, netns.Op)
		case netns.QEMU.Host:
			return fmt.Errorf("%w (run it in the host's namespace, not under ip netns exec)", err)
		}
		return fmt.Errorf("%w (run it there: nsenter --net=/proc/%d/ns/net virt vm %s …)", err, netns.PID, netns.Op)
	case errors.As(err, &scope):
		return fmt.Errorf("%w (systemd runs here, and a VM outside its own scope would die with the unit that started it: see virt host check's vm.scopes and systemctl status %s)", err, scope.Unit)
	}
	return err
}

// hasFieldKind reports whether err lists a field error of kind.
func hasFieldKind(err error, kind error) bool {
	var ve *fielderr.ValidationError
	if !errors.As(err, &ve) {
		return false
	}
	for _, fe := range ve.Errs {
		if errors.Is(fe, kind) {
			return true
		}
	}
	return false
}

// imageFlags names an image error's fields by the flags that set them.
func imageFlags(err error) error {
	var ie *vm.ImageError
	if !errors.As(err, &ie) {
		return err
	}
	flag := map[string]string{"name": "--name", "sha256": "--sha256"}
	out := &vm.ImageError{Errs: make([]*vm.FieldError, len(ie.Errs))}
	for i, fe := range ie.Errs {
		c := *fe
		if f, ok := flag[c.Field]; ok {
			c.Field = f
		}
		out.Errs[i] = &c
	}
	return out
}

// reasonHint is what the CLI adds to a listed row's message, by its reason.
func reasonHint(reason string) string {
	switch reason {
	case vm.ReasonProcessGone:
		return " (virt vm start to restart, virt vm stop to accept)"
	case vm.ReasonIncomplete:
		return " (virt vm gc removes it)"
	}
	return ""
}

// stopWords says how a VM went down (after its name).
func stopWords(r vm.StopResult, opts vm.StopOptions) string {
	took := r.Took.Round(100 * time.Millisecond)
	if r.Took < time.Second {
		took = r.Took.Round(10 * time.Millisecond)
	}
	switch r.How {
	case vm.StoppedACPI:
		return fmt.Sprintf("stopped: powered off by ACPI in %s", took)
	case vm.StoppedQuit:
		if opts.Force && !opts.Now && r.Took >= opts.Timeout {
			return fmt.Sprintf("stopped: the guest did not power off in %s, so QEMU was told to quit", opts.Timeout)
		}
		return fmt.Sprintf("stopped: QEMU quit in %s", took)
	case vm.StoppedKilled:
		return fmt.Sprintf("stopped: QEMU killed in %s (it answered neither the power button nor quit)", took)
	case vm.StoppedNotRunning:
		return "was not running"
	}
	return "stopped"
}
