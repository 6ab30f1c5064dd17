package directorcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
)

// errNodeNotFound: no node has the id, hostname or id prefix given.
var errNodeNotFound = errors.New("no such node")

func newNodeCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List, show, revoke, forget and resync enrolled hosts",
		Long: `A node is a host that enrolled with a join token. Its state is the director's
view of its session: Ready (heartbeats arrive), Degraded (silent for 30 s),
Offline (silent for 90 s) or Revoked. A silent node's VMs are shown as
"unknown (last seen PHASE at T)", never as stopped: the director does not know.
ID|HOSTNAME is a node id, a unique prefix of one (4 characters or more, as
node list prints them) or a hostname.`,
	}
	cmd.AddCommand(newNodeListCmd(env), newNodeShowCmd(env), newNodeRevokeCmd(env), newNodeForgetCmd(env), newNodeResyncCmd(env))
	return cmd
}

func newNodeListCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the enrolled nodes",
		Long: `List the enrolled nodes: ID (its first 8 characters), HOSTNAME, STATE, LAST SEEN,
CERT UNTIL (the client certificate's end; the agent renews it) and AGENT (its
version). -o json prints an array of objects with id, hostname, state,
stateSince, lastSeen (RFC 3339, or null when not heard from since the director
started), connected, hostUUID, certSerial, certNotAfter, agentVersion, address,
enrolledAt, revokedAt, revokeReason, taskKinds (the task kinds its agent runs)
and replicaId (the replica holding its session).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			nodes, err := env.listNodes(cmd.Context())
			if err != nil {
				return err
			}
			return renderNodeList(env.IO.Out, env.Output, nodes, env.clock())
		},
	}
}

func (e *Env) listNodes(ctx context.Context) ([]*directorv1.NodeInfo, error) {
	res, err := e.Admin().ListNodes(ctx, connect.NewRequest(&directorv1.ListNodesRequest{}))
	if err != nil {
		return nil, e.wordError("node list", err)
	}
	return res.Msg.GetNodes(), nil
}

// resolveNode finds the node an operator named (matchNode).
func (e *Env) resolveNode(ctx context.Context, ref string) (*directorv1.NodeInfo, error) {
	if strings.TrimSpace(ref) == "" {
		return nil, &UsageError{errors.New("node: empty id or hostname")}
	}
	nodes, err := e.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	return matchNode(nodes, ref)
}

func newNodeShowCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID|HOSTNAME",
		Short: "Show a node: its facts, capabilities, last report and VMs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			n, err := env.resolveNode(ctx, args[0])
			if err != nil {
				return err
			}
			res, err := env.Admin().GetNode(ctx, connect.NewRequest(&directorv1.GetNodeRequest{Id: n.GetId()}))
			if err != nil {
				return env.wordError("node show "+args[0], err)
			}
			return renderNodeShow(env.IO.Out, env.Output, res.Msg, env.clock())
		},
	}
}

func newNodeRevokeCmd(env *Env) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke ID|HOSTNAME",
		Short: "Revoke a node's certificates: its session ends at once, its VMs are untouched",
		Long: `Revoke a node's certificates. The director refuses its next request, on any
connection, and ends its session at once; the node's agent stops and says so on
the host. Nothing on the host is touched: its VMs keep running. To enrol the
host again, forget the node (node forget) and give it a new token.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(reason) > 200 {
				return &UsageError{fmt.Errorf("--reason: %d characters (at most 200)", len(reason))}
			}
			ctx := cmd.Context()
			n, err := env.resolveNode(ctx, args[0])
			if err != nil {
				return err
			}
			res, err := env.Admin().RevokeNode(ctx, connect.NewRequest(&directorv1.RevokeNodeRequest{Id: n.GetId(), Reason: reason}))
			if err != nil {
				return env.wordError("node revoke "+args[0], err)
			}
			node := res.Msg.GetNode()
			if node == nil {
				node = n
			}
			v := nodeView(node)
			return render(env.IO.Out, env.Output, v, func(w io.Writer) error {
				fmt.Fprintf(w, "node %s (%s) revoked; its VMs are untouched\n", v.ID, orDash(v.Hostname))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log and node show (at most 200 characters)")
	return cmd
}

func newNodeForgetCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "forget ID|HOSTNAME",
		Short: "Delete a revoked or offline node's record",
		Long: `Delete a node's record, once it is Revoked or Offline (the director refuses a
Ready or Degraded node: revoke it first). The host can then enrol again with a
new token. The audit log keeps what the node did.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			n, err := env.resolveNode(ctx, args[0])
			if err != nil {
				return err
			}
			if _, err := env.Admin().ForgetNode(ctx, connect.NewRequest(&directorv1.ForgetNodeRequest{Id: n.GetId()})); err != nil {
				return env.wordError("node forget "+args[0], err)
			}
			v := nodeView(n)
			return render(env.IO.Out, env.Output, map[string]any{"id": v.ID, "hostname": v.Hostname, "forgotten": true}, func(w io.Writer) error {
				fmt.Fprintf(w, "node %s (%s) forgotten\n", v.ID, orDash(v.Hostname))
				return nil
			})
		},
	}
}

func newNodeResyncCmd(env *Env) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "resync ID|HOSTNAME|--all",
		Short: "Ask a node (or every connected node) for its full VM inventory",
		Long: `Ask a node's agent, or with --all every connected node's, for a full inventory of
its VMs, which replaces what the director stored (vm list). The director does
this itself whenever a node registers; resync is for an inventory that looks
wrong. A node that is not connected answers when it next connects. It prints
the nodes asked.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return &UsageError{errors.New("node resync: a node or --all, not both")}
			case !all && len(args) != 1:
				return &UsageError{errors.New("node resync: name one node (ID|HOSTNAME) or --all")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			req := &directorv1.ResyncNodeRequest{All: all}
			op := "node resync --all"
			if !all {
				op = "node resync " + args[0]
				n, err := env.resolveNode(ctx, args[0])
				if err != nil {
					return err
				}
				req.Id = n.GetId()
			}
			res, err := env.Admin().ResyncNode(ctx, connect.NewRequest(req))
			if err != nil {
				return env.wordError(op, err)
			}
			nodes := res.Msg.GetNodes()
			if nodes == nil {
				nodes = []string{}
			}
			return render(env.IO.Out, env.Output, map[string]any{"nodes": nodes}, func(w io.Writer) error {
				if len(nodes) == 0 {
					fmt.Fprintln(w, "no node asked (none connected)")
					return nil
				}
				fmt.Fprintf(w, "resync asked of %d node(s): %s\n", len(nodes), strings.Join(nodes, ", "))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every connected node")
	return cmd
}
