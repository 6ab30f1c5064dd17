package directorcli

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/internal/output"
)

func newVMCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "List the VMs the nodes report",
		Long: `The director's VM inventory is what each node's agent reports: a full inventory
when it registers (and on node resync), then each change as it happens. It is
the hosts' ground truth: EXTERNAL guests (not started by virtcon) are listed as
such and never adopted, ORPHANED leftovers are listed and never deleted. To act
on a VM, run a task on its node (virt-director task run NODE start-vm NAME).`,
	}
	cmd.AddCommand(newVMListCmd(env))
	return cmd
}

func newVMListCmd(env *Env) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the VMs of every node (or of --node)",
		Long: `List the VMs the nodes last reported: NODE, NAME, UID (its first 8 characters),
CLASS (MANAGED, EXTERNAL or ORPHANED), PHASE, GEN (the host's generation: local
edits bump it) and DIR GEN (the generation the director stamped on a VM it
created, - for others). The phase of a node that is not Ready, or not heard
from since the director started, is "unknown (last seen PHASE at T)": a silent
node's VMs are never assumed stopped. Nodes with no inventory yet are named on
stderr. -o json prints an array of objects with node (its hostname), nodeId,
uid, name, class, phase, displayPhase, generation, observedGeneration,
directorGeneration (null when unset), cpus, memoryMiB, source, reason and
reportedAt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			req := &directorv1.ListVMsRequest{}
			if node != "" {
				n, err := env.resolveNode(ctx, node)
				if err != nil {
					return err
				}
				req.Node = n.GetId()
			}
			res, err := env.Admin().ListVMs(ctx, connect.NewRequest(req))
			if err != nil {
				return env.wordError("vm list", err)
			}
			if err := renderVMList(env.IO.Out, env.Output, res.Msg.GetVms()); err != nil {
				return err
			}
			if without := res.Msg.GetNodesWithoutInventory(); len(without) > 0 {
				fmt.Fprintf(output.TextOnly(env.IO.ErrOut), "no inventory yet from %d node(s): %s (a node sends one when it connects; virt-director node resync asks again)\n",
					len(without), strings.Join(without, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only the VMs of `NODE` (id, prefix or hostname)")
	return cmd
}

// VM is a VM of the director's inventory as virt-director prints it in
// JSON and YAML. docs/director.md documents it.
type VM struct {
	Node               string  `json:"node" yaml:"node"` // the node's hostname
	NodeID             string  `json:"nodeId" yaml:"nodeId"`
	UID                string  `json:"uid" yaml:"uid"`
	Name               string  `json:"name" yaml:"name"`
	Class              string  `json:"class" yaml:"class"`
	Phase              string  `json:"phase" yaml:"phase"`
	DisplayPhase       string  `json:"displayPhase" yaml:"displayPhase"`
	Generation         int64   `json:"generation" yaml:"generation"`
	ObservedGeneration int64   `json:"observedGeneration" yaml:"observedGeneration"`
	DirectorGeneration *string `json:"directorGeneration" yaml:"directorGeneration"` // null: not created by a director
	CPUs               uint32  `json:"cpus" yaml:"cpus"`
	MemoryMiB          uint64  `json:"memoryMiB" yaml:"memoryMiB"`
	Source             string  `json:"source" yaml:"source"` // an EXTERNAL guest's: qemu or libvirt
	Reason             string  `json:"reason" yaml:"reason"`
	ReportedAt         *string `json:"reportedAt" yaml:"reportedAt"`
}

func vmView(v *directorv1.NodeVM) VM {
	out := VM{Node: v.GetNodeHostname(), NodeID: v.GetNodeId(), UID: v.GetUid(), Name: v.GetName(), Class: v.GetClass(),
		Phase: v.GetPhase(), DisplayPhase: cmp.Or(v.GetDisplayPhase(), v.GetPhase()), Generation: v.GetGeneration(),
		ObservedGeneration: v.GetObservedGeneration(), CPUs: v.GetCpus(), MemoryMiB: v.GetMemoryMib(), Source: v.GetSource(),
		Reason: v.GetReason(), ReportedAt: rfc3339(msTime(v.GetReportedAtUnixMs()))}
	if g := v.GetDirectorGeneration(); g != "" {
		out.DirectorGeneration = &g
	}
	return out
}

// sortVMs orders VMs by node hostname, node id, name, uid.
func sortVMs(vms []*directorv1.NodeVM) []*directorv1.NodeVM {
	out := slices.Clone(vms)
	slices.SortStableFunc(out, func(a, b *directorv1.NodeVM) int {
		return cmp.Or(cmp.Compare(a.GetNodeHostname(), b.GetNodeHostname()), cmp.Compare(a.GetNodeId(), b.GetNodeId()),
			cmp.Compare(a.GetName(), b.GetName()), cmp.Compare(a.GetUid(), b.GetUid()))
	})
	return out
}

// renderVMList writes `vm list`: the table, or an array of VM.
func renderVMList(w io.Writer, format string, vms []*directorv1.NodeVM) error {
	vms = sortVMs(vms)
	views := make([]VM, 0, len(vms))
	for _, v := range vms {
		views = append(views, vmView(v))
	}
	return render(w, format, views, func(w io.Writer) error {
		fmt.Fprintln(w, "NODE\tNAME\tUID\tCLASS\tPHASE\tGEN\tDIR GEN")
		for _, v := range vms {
			gen := "-"
			if v.GetGeneration() > 0 {
				gen = fmt.Sprint(v.GetGeneration())
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cmp.Or(v.GetNodeHostname(), shortID(v.GetNodeId()), "-"), orDash(v.GetName()),
				orDash(shortID(v.GetUid())), orDash(v.GetClass()), cmp.Or(v.GetDisplayPhase(), v.GetPhase(), "-"), gen, orDash(v.GetDirectorGeneration()))
		}
		return nil
	})
}
