package director

import (
	"context"
	"slices"
	"strings"

	"github.com/virtcon/virtcon/api/directorv1"
)

// replicaInfos are the live replicas (replicas/ as this one sees it),
// this one first, with the leader flagged and the sessions each holds.
// The leader comes from the election when etcd answers, else from this
// replica's own view.
func (d *Director) replicaInfos(ctx context.Context) []*directorv1.ReplicaInfo {
	leader, err := d.store.Leader(ctx, electionSingletons)
	if err != nil {
		leader = ""
		if d.isLeader() {
			leader = d.replicaID
		}
	}
	d.mu.Lock()
	mine := len(d.sessions)
	d.mu.Unlock()
	d.ha.mu.Lock()
	counts := map[string]int{}
	for _, o := range d.ha.owners {
		counts[o.replica]++
	}
	reps := make([]replicaRecord, 0, len(d.ha.replicas)+1)
	self := false
	for _, r := range d.ha.replicas {
		reps = append(reps, r)
		self = self || r.ID == d.replicaID
	}
	d.ha.mu.Unlock()
	if !self {
		reps = append(reps, replicaRecord{ID: d.replicaID, Advertise: d.advertise, Version: d.version, StartedAt: ms(d.startedAt)})
	}
	slices.SortFunc(reps, func(a, b replicaRecord) int {
		switch {
		case a.ID == b.ID:
			return 0
		case a.ID == d.replicaID:
			return -1
		case b.ID == d.replicaID:
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := make([]*directorv1.ReplicaInfo, 0, len(reps))
	for _, r := range reps {
		n := counts[r.ID]
		if r.ID == d.replicaID {
			n = mine
		}
		out = append(out, &directorv1.ReplicaInfo{Id: r.ID, Advertise: r.Advertise, Version: r.Version,
			StartedAtUnixMs: r.StartedAt, Leader: r.ID == leader, Sessions: uint32(n)})
	}
	return out
}
