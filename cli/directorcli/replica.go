package directorcli

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
)

func newReplicaCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replica",
		Short: "List the director's replicas",
		Long: `Several virt-director serve processes over one etcd cluster are replicas of one
director: any of them takes any agent's session and any admin request, and one,
the leader, runs the singleton work (the liveness sweep of nodes no replica
holds, the task sweeper).`,
	}
	cmd.AddCommand(newReplicaListCmd(env))
	return cmd
}

func newReplicaListCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the live replicas",
		Long: `List the live replicas: ID, ADVERTISE (the address agents dial), LEADER,
SESSIONS (the agents connected to it), VERSION and STARTED. -o json prints an
array of objects with id, advertise, leader, sessions, version and startedAt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := env.Admin().ListReplicas(cmd.Context(), connect.NewRequest(&directorv1.ListReplicasRequest{}))
			if err != nil {
				return env.wordError("replica list", err)
			}
			return renderReplicaList(env.IO.Out, env.Output, res.Msg.GetReplicas(), env.clock())
		},
	}
}

// Replica is a director replica as virt-director prints it in JSON and
// YAML.
type Replica struct {
	ID        string  `json:"id" yaml:"id"`
	Advertise string  `json:"advertise" yaml:"advertise"`
	Leader    bool    `json:"leader" yaml:"leader"`
	Sessions  uint32  `json:"sessions" yaml:"sessions"`
	Version   string  `json:"version" yaml:"version"`
	StartedAt *string `json:"startedAt" yaml:"startedAt"`
}

func renderReplicaList(w io.Writer, format string, replicas []*directorv1.ReplicaInfo, c clock) error {
	replicas = slices.Clone(replicas)
	slices.SortStableFunc(replicas, func(a, b *directorv1.ReplicaInfo) int { return cmp.Compare(a.GetId(), b.GetId()) })
	views := make([]Replica, 0, len(replicas))
	for _, r := range replicas {
		views = append(views, Replica{ID: r.GetId(), Advertise: r.GetAdvertise(), Leader: r.GetLeader(), Sessions: r.GetSessions(),
			Version: r.GetVersion(), StartedAt: rfc3339(msTime(r.GetStartedAtUnixMs()))})
	}
	return render(w, format, views, func(w io.Writer) error {
		fmt.Fprintln(w, "ID\tADVERTISE\tLEADER\tSESSIONS\tVERSION\tSTARTED")
		for _, r := range replicas {
			leader := ""
			if r.GetLeader() {
				leader = "yes"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", orDash(r.GetId()), orDash(r.GetAdvertise()), orDash(leader), r.GetSessions(),
				orDash(r.GetVersion()), c.ago(msTime(r.GetStartedAtUnixMs())))
		}
		return nil
	})
}
