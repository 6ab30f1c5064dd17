package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/virtcon/virtcon/vm"
)

// eventsService is what `virt vm events` asks of the core.
type eventsService interface {
	Events(ctx context.Context, refs []string, o vm.EventsOptions, f func(vm.Event)) error
}

var _ eventsService = (*vm.Manager)(nil)

func (e *Env) events() (eventsService, error) {
	s, ok := e.vms().(eventsService)
	if !ok {
		return nil, errors.New("vm events: the VM service has no events")
	}
	return s, nil
}

func newVMEventsCmd(env *Env) *cobra.Command {
	var (
		follow bool
		types  []string
	)
	cmd := &cobra.Command{
		Use:   "events [VM]",
		Short: "Print a running VM's QMP events (all running VMs without a name): the next one, or all with --follow",
		Long: `Print the QMP events of a running VM, or of every running VM without a name:
SHUTDOWN, RESET, STOP, RESUME, GUEST_PANICKED, BLOCK_IO_ERROR, DEVICE_DELETED
and whatever else QEMU sends (POWERDOWN, RTC_CHANGE, ...), each with QEMU's own
timestamp and the VM's name and UID. --type keeps only the named events.

QEMU keeps no event history: what happened before the command connected is
not shown. Without --follow the command waits for the next event, prints it
and exits (a script's "wait until the VM does something"); with --follow it
prints every event until interrupted or until every followed VM's QEMU has
exited. VMs started after the command are not followed. A QEMU that ends
without a SHUTDOWN event (killed -9, crashed) is an error once the others
are done: "QEMU ended without SHUTDOWN", exit 1.

Times are QEMU's, in RFC 3339 with 6 digits of fractional seconds (one width).
-o json prints one JSON object per line ({"uid","name","event","at","data"}),
-o yaml one document per event. The events come from the VM's own QMP event
socket (qmp-watch.sock), so the agent's inventory, which reads another one,
keeps working; two virt vm events of the same VM at once share the two.`,
		Example: `  virt vm events web --follow
  virt vm events web --type SHUTDOWN      # wait for the guest to shut down
  virt vm events --follow -o json`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if env.Output == FormatWide {
				return &UsageError{errors.New("--output wide: virt vm events has table, json and yaml")}
			}
			for i, t := range types {
				types[i] = strings.ToUpper(strings.TrimSpace(t))
				if types[i] == "" {
					return &UsageError{fmt.Errorf("--type %q: want an event name such as SHUTDOWN", t)}
				}
			}
			svc, err := env.events()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			var werr error
			n := 0
			err = svc.Events(ctx, args, vm.EventsOptions{Ready: func(names []string) {
				if len(names) == 0 {
					fmt.Fprintln(env.IO.ErrOut, "virt: no running VMs: no events to follow")
					return
				}
				fmt.Fprintf(textOnly{env.IO.ErrOut}, "virt: following the events of %s\n", strings.Join(names, ", "))
			}}, func(e vm.Event) {
				if len(types) > 0 && !slices.Contains(types, e.Event) {
					return
				}
				if werr == nil {
					werr = writeEvent(env.IO.Out, env.Output, e, n == 0)
				}
				n++
				if !follow || werr != nil {
					cancel()
				}
			})
			if werr != nil {
				return werr
			}
			if err != nil && cmd.Context().Err() == nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print every event until interrupted or the VMs exit (default: the next event, then exit)")
	cmd.Flags().StringSliceVar(&types, "type", nil, "only these events (comma-separated or repeated, e.g. SHUTDOWN,RESET)")
	return cmd
}

// writeEvent writes one event as it comes: a line of the table, a JSON
// line or a YAML document.
func writeEvent(w io.Writer, format string, e vm.Event, first bool) error {
	if done, err := renderStreamed(w, format, e, first); done {
		return err
	}
	_, err := fmt.Fprintf(textOnly{w}, "%s  %s  %s%s\n", e.At.Local().Format(vm.EventTimeFormat), e.Name, e.Event, eventDetails(e.Data))
	return err
}

// eventDetails words an event's data as " key=value ...", keys sorted.
func eventDetails(d map[string]any) string {
	if len(d) == 0 {
		return ""
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v, _ := json.Marshal(d[k])
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}
