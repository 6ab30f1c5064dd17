package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtcon/virtcon/vm"
)

// statsService is what `virt vm stats` asks of the core.
type statsService interface {
	Stats(ctx context.Context, refs []string) ([]vm.Stats, error)
}

var _ statsService = (*vm.Manager)(nil)

// stats is the stats service: the VM service (the host's manager, or a
// test's fake) when it has Stats.
func (e *Env) stats() (statsService, error) {
	s, ok := e.vms().(statsService)
	if !ok {
		return nil, errors.New("vm stats: the VM service has no stats")
	}
	return s, nil
}

// minStatsInterval is the shortest --interval: a sample takes
// vm.StatsInterval.
const minStatsInterval = 500 * time.Millisecond

func newVMStatsCmd(env *Env) *cobra.Command {
	var (
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats [VM...]",
		Short: "Show VMs' CPU, memory, disk and network use (all VMs without names)",
		Long: `Show each VM's live resource use: CPU % of its QEMU process (100 per host
core; all its threads, so a busy 1-vCPU guest shows about 100), the process's
resident memory (RSS) and the balloon's size (0: no balloon device), each disk's
read and write bytes and operations (QMP query-blockstats, since QEMU started),
and each NIC's bytes and packets from the guest's side (its TAP's counters; the
user-mode NIC has none: "-"). What cannot be read is "-" in the table and
known: false (cpuKnown: false) in JSON and YAML, never a made-up zero.

CPU % needs two readings: one sample reads the CPU time, then the rest, then
the CPU time again 250 ms after the first, so a one-shot takes about 250 ms.
--watch samples again every --interval (default 2s) until interrupted: the
table is redrawn (on a terminal) and -o json prints one JSON array per line,
-o yaml one document per sample.`,
		Example: `  virt vm stats
  virt vm stats web db -o json
  virt vm stats --watch --interval 5s`,
		ValidArgsFunction: vmNames(env),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval < minStatsInterval {
				return &UsageError{fmt.Errorf("--interval %s: want at least %s", interval, minStatsInterval)}
			}
			if cmd.Flags().Changed("interval") && !watch {
				return &UsageError{errors.New("--interval: only with --watch")}
			}
			svc, err := env.stats()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !watch {
				st, err := svc.Stats(ctx, args)
				if err != nil {
					return err
				}
				return render(env.IO.Out, env.Output, st, func(w io.Writer) error { return statsTable(w, st) })
			}
			for first := true; ; first = false {
				begin := time.Now()
				st, err := svc.Stats(ctx, args)
				if ctx.Err() != nil {
					return nil // interrupted: the end of a watch
				}
				if err != nil {
					return err
				}
				if err := writeStatsFrame(env, st, first); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval - time.Since(begin)):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "sample again every --interval until interrupted")
	durationFlag(cmd.Flags(), &interval, "interval", 2*time.Second, "how often --watch samples (at least 500ms)")
	return cmd
}

// writeStatsFrame writes one --watch sample.
func writeStatsFrame(env *Env, st []vm.Stats, first bool) error {
	w := env.IO.Out
	if done, err := renderStreamed(w, env.Output, st, first); done {
		return err
	}
	if env.IO.OutTTY {
		fmt.Fprint(w, "\x1b[H\x1b[2J") // home and clear: the table redrawn in place
	} else if !first {
		fmt.Fprintln(w)
	}
	return render(w, FormatTable, st, func(w io.Writer) error { return statsTable(w, st) })
}

// statsTable is the human view: one row per VM, disks and NICs summed
// (each one is in JSON and YAML).
func statsTable(w io.Writer, st []vm.Stats) error {
	fmt.Fprintln(w, "NAME\tPHASE\tCPU\tMEMORY\tDISK READ\tDISK WRITE\tNET RX\tNET TX")
	for _, s := range st {
		cpu := "-"
		if s.CPUKnown {
			cpu = fmt.Sprintf("%.1f%%", s.CPUPercent)
		}
		mem := "-"
		if s.RSSBytes > 0 {
			mem = humanBytes(s.RSSBytes)
			if s.BalloonBytes > 0 {
				mem += " (balloon " + humanBytes(s.BalloonBytes) + ")"
			}
		}
		rd, wr := diskSums(s.Disks)
		rx, tx := nicSums(s.NICs)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Phase, cpu, mem, rd, wr, rx, tx)
	}
	return nil
}

// diskSums words the read and write totals of the known disks ("-" when
// none is known): bytes and operations.
func diskSums(ds []vm.DiskStats) (read, write string) {
	var rb, wb, ro, wo int64
	known := false
	for _, d := range ds {
		if d.Known {
			known = true
			rb, wb, ro, wo = rb+d.ReadBytes, wb+d.WriteBytes, ro+d.ReadOps, wo+d.WriteOps
		}
	}
	if !known {
		return "-", "-"
	}
	return fmt.Sprintf("%s/%d ops", humanBytes(rb), ro), fmt.Sprintf("%s/%d ops", humanBytes(wb), wo)
}

// nicSums words the guest's receive and send totals of the known NICs.
func nicSums(ns []vm.NICStats) (rx, tx string) {
	var rb, tb, rp, tp int64
	known := false
	for _, n := range ns {
		if n.Known {
			known = true
			rb, tb, rp, tp = rb+n.RxBytes, tb+n.TxBytes, rp+n.RxPackets, tp+n.TxPackets
		}
	}
	if !known {
		return "-", "-"
	}
	return fmt.Sprintf("%s/%d pkts", humanBytes(rb), rp), fmt.Sprintf("%s/%d pkts", humanBytes(tb), tp)
}
