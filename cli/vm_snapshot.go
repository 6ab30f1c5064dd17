package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/virtcon/virtcon/vm"
)

// snapshotService is what the snapshot commands (and vm delete
// --with-snapshots) ask of the core's VM manager.
type snapshotService interface {
	CreateSnapshot(ctx context.Context, ref, name string, o vm.SnapshotOptions) (*vm.Snapshot, error)
	ListSnapshots(ctx context.Context, ref string) ([]vm.Snapshot, error)
	RestoreSnapshot(ctx context.Context, ref, name string, o vm.RestoreOptions) error
	DeleteSnapshot(ctx context.Context, ref, name string) error
	DeleteWith(ctx context.Context, ref string, o vm.DeleteOptions) error
}

var _ snapshotService = (*vm.Manager)(nil)

// snapshots is the snapshot service: a test's fake VM service when it
// has these methods, else the host's VM manager.
func (e *Env) snapshots() snapshotService {
	if s, ok := e.vmSvc.(snapshotService); ok {
		return s
	}
	return e.Host().VMs
}

// wordSnapshotError adds what the CLI user can do about a snapshot error.
func wordSnapshotError(err error) error {
	var (
		running *vm.RestoreRunningError
		has     *vm.HasSnapshotsError
		exists  *vm.SnapshotExistsError
		missing *vm.SnapshotNotFoundError
		layout  *vm.SnapshotLayoutError
		unrec   *vm.SnapshotUnrecordedError
		shape   *vm.SnapshotShapeError
	)
	switch {
	case errors.As(err, &running) && running.Memory:
		return fmt.Errorf("%w; --force loads the snapshot into the running guest, which jumps back to it (what it did since is lost)", err)
	case errors.As(err, &running):
		return fmt.Errorf("%w; --force powers it off at once (no shutdown), restores its disks and starts it again (what it did since is lost)", err)
	case errors.As(err, &has):
		return fmt.Errorf("%w; virt vm delete %s --with-snapshots deletes them with it (virt vm snapshot list %s)", err, has.VM, has.VM)
	case errors.As(err, &exists):
		taken := exists.Existing
		if taken == "" {
			taken = exists.Name
		}
		return fmt.Errorf("%w (virt vm snapshot delete %s %s first, or choose another name)", err, exists.VM, taken)
	case errors.As(err, &missing):
		return fmt.Errorf("%w (virt vm snapshot list %s)", err, missing.VM)
	case errors.As(err, &unrec):
		return fmt.Errorf("%w; virt vm snapshot delete %s %s removes it from every disk that holds it (take a new snapshot to have one to restore)", err, unrec.VM, unrec.Name)
	case errors.As(err, &shape):
		return fmt.Errorf("%w: change the spec back (virt vm edit %s) to restore it, or restore a disk-only snapshot", err, shape.VM)
	case errors.As(err, &layout):
		return fmt.Errorf("%w: restore only snapshots taken of the disks the VM has now", err)
	}
	return err
}

func newVMSnapshotCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snap"},
		Short:   "Take, list, restore and delete snapshots of a VM's disks (and RAM with --memory)",
		Long: `Snapshots are qcow2 internal snapshots, one name on every disk of the VM, all
taken at the same instant: while the VM runs through QEMU (the guest paused
for the moment it takes, some milliseconds), while it is stopped with
qemu-img. --memory also saves RAM and device state (the VM must run), so a
restore resumes the guest where it was. They live inside the disk files:
virt vm delete refuses a VM with snapshots unless --with-snapshots.`,
	}
	cmd.AddCommand(newVMSnapshotCreateCmd(env), newVMSnapshotListCmd(env), newVMSnapshotRestoreCmd(env), newVMSnapshotDeleteCmd(env))
	return cmd
}

// snapshotRow is one snapshot as -o json/yaml prints it (docs/vms.md).
type snapshotRow struct {
	Name      string    `json:"name" yaml:"name"`
	CreatedAt time.Time `json:"createdAt" yaml:"createdAt"`
	// VMStateBytes is the memory and device state it holds (0: disk-only);
	// SizeBytes is the same figure under its old name
	VMStateBytes int64            `json:"vmStateBytes" yaml:"vmStateBytes"`
	SizeBytes    int64            `json:"sizeBytes" yaml:"sizeBytes"`
	Memory       bool             `json:"memory" yaml:"memory"`
	Disks        []string         `json:"disks" yaml:"disks"`
	State        vm.SnapshotState `json:"state" yaml:"state"`
	Why          string           `json:"why,omitempty" yaml:"why,omitempty"`
}

func rowOf(s vm.Snapshot) snapshotRow {
	disks := s.Disks
	if disks == nil {
		disks = []string{}
	}
	return snapshotRow{Name: s.Name, CreatedAt: s.CreatedAt, VMStateBytes: s.VMStateBytes, SizeBytes: s.VMStateBytes,
		Memory: s.Memory, Disks: disks, State: s.State, Why: s.Why}
}

// stateCell is a snapshot's STATE as the table shows it: the ones that
// cannot be restored in capitals.
func stateCell(st vm.SnapshotState) string {
	if st == vm.SnapshotRecorded || st == "" {
		return "recorded"
	}
	return strings.ToUpper(string(st))
}

// vmStateCell is the memory state's size, "-" for a disk-only snapshot.
func vmStateCell(n int64) string {
	if n <= 0 {
		return "-"
	}
	return humanBytes(n)
}

func newVMSnapshotCreateCmd(env *Env) *cobra.Command {
	var o vm.SnapshotOptions
	cmd := &cobra.Command{
		Use:   "create VM SNAPSHOT",
		Short: "Snapshot every disk of a VM at the same instant (--memory: RAM and devices too)",
		Example: `  virt vm snapshot create web before-upgrade
  virt vm snapshot create web live --memory`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			o.Progress = env.opProgress()
			s, err := env.snapshots().CreateSnapshot(cmd.Context(), args[0], args[1], o)
			if err != nil {
				return wordSnapshotError(err)
			}
			took := time.Since(start)
			return render(env.IO.Out, env.Output, rowOf(*s), func(w io.Writer) error {
				what := "disks"
				if s.Memory {
					what = "disks, RAM and devices; " + humanBytes(s.VMStateBytes) + " of memory state"
				}
				fmt.Fprintf(w, "%s: snapshot %s taken (%s) in %s\n", args[0], s.Name, what, took.Round(time.Millisecond))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&o.Memory, "memory", false, "also save RAM and device state (the VM must run): a restore resumes the guest where it was")
	return cmd
}

func newVMSnapshotListCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:     "list VM",
		Aliases: []string{"ls"},
		Short:   "List a VM's snapshots, read from its disks: name, date, memory state, disks, state",
		Long: `List a VM's snapshots, read from its disks. VMSTATE is the memory and
device state a snapshot holds (- for a disk-only one). A snapshot's disk data
has no size of its own: qcow2 internal snapshots share clusters with the live
disk and each other, and what deleting one frees depends on what was written
since. STATE is recorded for a snapshot virt finished making; UNRECORDED (on
the disks but not in snapshots.json: a snapshot command that did not finish,
or one made outside virt) and PARTIAL (on only some disks) are listed with
why, are never restored, and are removed by virt vm snapshot delete.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			snaps, err := env.snapshots().ListSnapshots(cmd.Context(), args[0])
			if err != nil {
				return wordSnapshotError(err)
			}
			rows := make([]snapshotRow, 0, len(snaps))
			for _, s := range snaps {
				rows = append(rows, rowOf(s))
			}
			return render(env.IO.Out, env.Output, rows, func(w io.Writer) error {
				fmt.Fprintln(w, "NAME\tDATE\tVMSTATE\tMEMORY\tDISKS\tSTATE")
				var notes []string
				for _, r := range rows {
					disks := "-"
					if len(r.Disks) > 0 {
						disks = fmt.Sprint(len(r.Disks))
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.CreatedAt.Local().Format(time.DateTime), vmStateCell(r.VMStateBytes), yesNo(r.Memory), disks, stateCell(r.State))
					if r.Why != "" {
						notes = append(notes, fmt.Sprintf("%s %s: %s; not restored (virt vm snapshot delete %s %s removes it)", stateCell(r.State), r.Name, r.Why, args[0], r.Name))
					}
				}
				if len(notes) > 0 {
					fmt.Fprintln(w)
					for _, n := range notes {
						fmt.Fprintln(w, n)
					}
				}
				return nil
			})
		},
	}
}

func newVMSnapshotRestoreCmd(env *Env) *cobra.Command {
	var o vm.RestoreOptions
	cmd := &cobra.Command{
		Use:   "restore VM SNAPSHOT",
		Short: "Bring a VM's disks (and RAM, for a memory snapshot) back to a snapshot; a running VM needs --force",
		Long: `Bring a VM's disks back to a snapshot. A stopped VM stays stopped, except
that a memory snapshot starts it: the guest resumes where the snapshot was
taken. A running VM needs --force: a disk-only snapshot powers it off at
once (no shutdown: its disks go back in time under it), restores the disks
and starts it again; a memory snapshot is loaded into the running QEMU and
the guest jumps back to it. A snapshot taken before a disk was added or
removed is refused.`,
		Example: `  virt vm snapshot restore web before-upgrade
  virt vm snapshot restore web live --force`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Progress = env.opProgress()
			if err := env.snapshots().RestoreSnapshot(cmd.Context(), args[0], args[1], o); err != nil {
				return wordSnapshotError(err)
			}
			fmt.Fprintf(textOnly{env.IO.ErrOut}, "%s: restored to snapshot %s\n", args[0], args[1])
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "restore a running VM (what it did since the snapshot is lost)")
	return cmd
}

func newVMSnapshotDeleteCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:               "delete VM SNAPSHOT",
		Aliases:           []string{"rm"},
		Short:             "Delete a snapshot from every disk of a VM",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := env.snapshots().DeleteSnapshot(cmd.Context(), args[0], args[1]); err != nil {
				return wordSnapshotError(err)
			}
			fmt.Fprintf(textOnly{env.IO.ErrOut}, "%s: snapshot %s deleted\n", args[0], args[1])
			return nil
		},
	}
}
