package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/virtcon/virtcon/vm"
)

// addSSHAccess turns --ssh-key and --user into the VM's user data: the
// core's cloud-config (vm.CloudConfig), merged into the user data
// --cloud-init-user-data gave, if any. The keys' files are read here;
// their content (and the user data) is never printed.
func addSSHAccess(v *vm.VirtualMachine, keyFiles []string, user string) error {
	if len(keyFiles) == 0 {
		if user != "" {
			return &UsageError{fmt.Errorf("--user %q: needs --ssh-key (the user's password is locked: without a key nobody could log in)", user)}
		}
		return nil
	}
	if user != "" {
		if err := vm.ValidateUserName(user); err != nil {
			return &UsageError{fmt.Errorf("--user: %w", err)}
		}
	}
	var keys []string
	for _, f := range keyFiles {
		st, err := os.Stat(f)
		if err != nil {
			return &UsageError{fmt.Errorf("--ssh-key: %w", err)}
		}
		if !st.Mode().IsRegular() {
			return &UsageError{fmt.Errorf("--ssh-key %q: not a regular file", f)}
		}
		if st.Size() > 1<<20 {
			return &UsageError{fmt.Errorf("--ssh-key %q: %d bytes: too big for a public key file", f, st.Size())}
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return &UsageError{fmt.Errorf("--ssh-key: %w", err)}
		}
		ks, err := vm.ParseSSHPublicKeys(b, f)
		if err != nil {
			return &UsageError{fmt.Errorf("--ssh-key: %w", err)}
		}
		keys = append(keys, ks...)
	}
	var userData string
	if v.Spec.CloudInit != nil {
		userData = v.Spec.CloudInit.UserData
	}
	ud, err := vm.CloudConfig(vm.SSHAccess{User: user, Keys: keys}, userData)
	if err != nil {
		if errors.Is(err, vm.ErrInvalid) {
			return &UsageError{err}
		}
		return err
	}
	if v.Spec.CloudInit == nil {
		v.Spec.CloudInit = &vm.CloudInit{}
	}
	v.Spec.CloudInit.UserData = ud
	return nil
}
