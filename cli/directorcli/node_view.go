package directorcli

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
)

// Node is a node as virt-director prints it in JSON and YAML: a stable
// shape of its own, camelCase, times in RFC 3339 (UTC) or null, not the
// API's protobuf JSON. docs/director.md documents it.
type Node struct {
	ID           string  `json:"id" yaml:"id"`
	Hostname     string  `json:"hostname" yaml:"hostname"`
	State        string  `json:"state" yaml:"state"` // Ready, Degraded, Offline or Revoked
	StateSince   *string `json:"stateSince" yaml:"stateSince"`
	LastSeen     *string `json:"lastSeen" yaml:"lastSeen"` // null: not heard from since the director started
	Connected    bool    `json:"connected" yaml:"connected"`
	HostUUID     string  `json:"hostUUID" yaml:"hostUUID"`
	CertSerial   string  `json:"certSerial" yaml:"certSerial"`
	CertNotAfter *string `json:"certNotAfter" yaml:"certNotAfter"`
	AgentVersion string  `json:"agentVersion" yaml:"agentVersion"`
	Address      string  `json:"address" yaml:"address"`
	EnrolledAt   *string `json:"enrolledAt" yaml:"enrolledAt"`
	RevokedAt    *string `json:"revokedAt" yaml:"revokedAt"`
	RevokeReason string  `json:"revokeReason" yaml:"revokeReason"`
	// TaskKinds are the task kinds the node's agent said it runs when it
	// last registered (empty: an agent that predates tasks).
	TaskKinds []string `json:"taskKinds" yaml:"taskKinds"`
	// ReplicaID is the director replica holding the node's session.
	ReplicaID string `json:"replicaId" yaml:"replicaId"`
}

func nodeView(n *directorv1.NodeInfo) Node {
	return Node{
		ID:           n.GetId(),
		Hostname:     n.GetHostname(),
		State:        n.GetState(),
		StateSince:   rfc3339(msTime(n.GetStateSinceUnixMs())),
		LastSeen:     rfc3339(msTime(n.GetLastSeenUnixMs())),
		Connected:    n.GetConnected(),
		HostUUID:     n.GetHostUuid(),
		CertSerial:   n.GetCertSerial(),
		CertNotAfter: rfc3339(msTime(n.GetCertNotAfterUnixMs())),
		AgentVersion: n.GetAgentVersion(),
		Address:      n.GetAddress(),
		EnrolledAt:   rfc3339(msTime(n.GetEnrolledAtUnixMs())),
		RevokedAt:    rfc3339(msTime(n.GetRevokedAtUnixMs())),
		RevokeReason: n.GetRevokeReason(),
		TaskKinds:    append([]string{}, n.GetTaskKinds()...),
		ReplicaID:    n.GetReplicaId(),
	}
}

// sortNodes orders nodes by hostname, then id: the same list prints the
// same way whatever order the director sent it in.
func sortNodes(nodes []*directorv1.NodeInfo) []*directorv1.NodeInfo {
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b *directorv1.NodeInfo) int {
		return cmp.Or(cmp.Compare(a.GetHostname(), b.GetHostname()), cmp.Compare(a.GetId(), b.GetId()))
	})
	return out
}

// shortID is a node id's first 8 characters, enough to tell nodes apart
// (node show/revoke/forget take any unique prefix).
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// renderNodeList writes `node list`: the table, or an array of Node.
func renderNodeList(w io.Writer, format string, nodes []*directorv1.NodeInfo, c clock) error {
	nodes = sortNodes(nodes)
	views := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		views = append(views, nodeView(n))
	}
	return render(w, format, views, func(w io.Writer) error {
		fmt.Fprintln(w, "ID\tHOSTNAME\tSTATE\tLAST SEEN\tCERT UNTIL\tAGENT")
		for _, n := range nodes {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", shortID(n.GetId()), orDash(n.GetHostname()), nodeState(n),
				c.ago(msTime(n.GetLastSeenUnixMs())), c.date(msTime(n.GetCertNotAfterUnixMs())), orDash(n.GetAgentVersion()))
		}
		return nil
	})
}

// nodeState is the STATE column: the state, and why for a revoked node.
func nodeState(n *directorv1.NodeInfo) string {
	if n.GetState() == "Revoked" && n.GetRevokeReason() != "" {
		return "Revoked (" + n.GetRevokeReason() + ")"
	}
	return orDash(n.GetState())
}

// NodeDetail is `node show` in JSON and YAML: the Node, what the host
// said of itself at enrolment or registration, its capabilities, its
// last report and its VMs as last reported.
type NodeDetail struct {
	Node         `json:",inline" yaml:",inline"`
	Host         *HostFacts   `json:"host" yaml:"host"`
	Capabilities []Capability `json:"capabilities" yaml:"capabilities"`
	LastReport   *Report      `json:"lastReport" yaml:"lastReport"`
	VMs          []NodeVM     `json:"vms" yaml:"vms"`
}

// HostFacts is what a node says of itself.
type HostFacts struct {
	HostUUID     string `json:"hostUUID" yaml:"hostUUID"`
	Hostname     string `json:"hostname" yaml:"hostname"`
	BootID       string `json:"bootID" yaml:"bootID"`
	AgentVersion string `json:"agentVersion" yaml:"agentVersion"`
	OS           string `json:"os" yaml:"os"`
	Kernel       string `json:"kernel" yaml:"kernel"`
	QEMUVersion  string `json:"qemuVersion" yaml:"qemuVersion"`
}

// Capability is one of a node's capabilities: available only when the
// node's check passed; detail says why not.
type Capability struct {
	Name      string `json:"name" yaml:"name"`
	Available bool   `json:"available" yaml:"available"`
	Detail    string `json:"detail" yaml:"detail"`
}

// Report is a node's last host report.
type Report struct {
	At                 *string      `json:"at" yaml:"at"`
	CPUPercent         float64      `json:"cpuPercent" yaml:"cpuPercent"`
	MemTotalBytes      uint64       `json:"memTotalBytes" yaml:"memTotalBytes"`
	MemAvailableBytes  uint64       `json:"memAvailableBytes" yaml:"memAvailableBytes"`
	VMCounts           VMCounts     `json:"vmCounts" yaml:"vmCounts"`
	Acceleration       string       `json:"acceleration" yaml:"acceleration"`
	AccelerationReason string       `json:"accelerationReason" yaml:"accelerationReason"`
	WorstCheck         *CheckResult `json:"worstCheck" yaml:"worstCheck"`
}

// VMCounts counts a node's VMs by phase and class.
type VMCounts struct {
	Running  uint32 `json:"running" yaml:"running"`
	Stopped  uint32 `json:"stopped" yaml:"stopped"`
	Paused   uint32 `json:"paused" yaml:"paused"`
	Other    uint32 `json:"other" yaml:"other"`
	External uint32 `json:"external" yaml:"external"`
	Orphaned uint32 `json:"orphaned" yaml:"orphaned"`
}

// CheckResult is a node's worst host check.
type CheckResult struct {
	ID     string `json:"id" yaml:"id"`
	Status string `json:"status" yaml:"status"`
	Detail string `json:"detail" yaml:"detail"`
}

// NodeVM is a VM as its node last reported it. DisplayPhase is the phase
// while the node is Ready, "unknown (last seen PHASE at T)" while it is
// not: a silent node's VMs are never assumed stopped.
type NodeVM struct {
	UID          string  `json:"uid" yaml:"uid"`
	Name         string  `json:"name" yaml:"name"`
	Class        string  `json:"class" yaml:"class"`
	Phase        string  `json:"phase" yaml:"phase"`
	DisplayPhase string  `json:"displayPhase" yaml:"displayPhase"`
	ReportedAt   *string `json:"reportedAt" yaml:"reportedAt"`
}

func nodeDetail(r *directorv1.GetNodeResponse) NodeDetail {
	d := NodeDetail{Node: nodeView(r.GetNode()), Capabilities: []Capability{}, VMs: []NodeVM{}}
	if h := r.GetHost(); h != nil {
		d.Host = &HostFacts{HostUUID: h.GetHostUuid(), Hostname: h.GetHostname(), BootID: h.GetBootId(), AgentVersion: h.GetAgentVersion(),
			OS: h.GetOsPretty(), Kernel: h.GetKernel(), QEMUVersion: h.GetQemuVersion()}
	}
	for _, c := range r.GetCapabilities() {
		d.Capabilities = append(d.Capabilities, Capability{Name: c.GetName(), Available: c.GetAvailable(), Detail: c.GetDetail()})
	}
	if rep := r.GetLastReport(); rep != nil {
		vc := rep.GetVmCounts()
		d.LastReport = &Report{
			At:         rfc3339(msTime(r.GetLastReportUnixMs())),
			CPUPercent: rep.GetCpuPercent(), MemTotalBytes: rep.GetMemTotalBytes(), MemAvailableBytes: rep.GetMemAvailableBytes(),
			VMCounts: VMCounts{Running: vc.GetRunning(), Stopped: vc.GetStopped(), Paused: vc.GetPaused(), Other: vc.GetOther(),
				External: vc.GetExternal(), Orphaned: vc.GetOrphaned()},
			Acceleration: rep.GetAcceleration(), AccelerationReason: rep.GetAccelerationReason(),
		}
		if wc := rep.GetWorstCheck(); wc != nil {
			d.LastReport.WorstCheck = &CheckResult{ID: wc.GetId(), Status: wc.GetStatus(), Detail: wc.GetDetail()}
		}
	}
	for _, v := range r.GetVms() {
		d.VMs = append(d.VMs, NodeVM{UID: v.GetUid(), Name: v.GetName(), Class: v.GetClass(), Phase: v.GetPhase(),
			DisplayPhase: cmp.Or(v.GetDisplayPhase(), v.GetPhase()), ReportedAt: rfc3339(msTime(v.GetReportedAtUnixMs()))})
	}
	return d
}

// renderNodeShow writes `node show`.
func renderNodeShow(w io.Writer, format string, r *directorv1.GetNodeResponse, c clock) error {
	return render(w, format, nodeDetail(r), func(w io.Writer) error {
		n := r.GetNode()
		line := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, v) }
		line("ID", n.GetId())
		line("Hostname", orDash(n.GetHostname()))
		state := orDash(n.GetState())
		if since := msTime(n.GetStateSinceUnixMs()); !since.IsZero() {
			state += " since " + c.stamp(since)
		}
		line("State", state)
		seen := c.ago(msTime(n.GetLastSeenUnixMs()))
		if seen == "-" {
			seen = "not since the director started"
		}
		line("Last seen", seen)
		line("Connected", yesNo(n.GetConnected()))
		line("Address", orDash(n.GetAddress()))
		line("Agent", orDash(n.GetAgentVersion()))
		kinds := strings.Join(n.GetTaskKinds(), ", ")
		if kinds == "" {
			kinds = "none (the agent predates tasks)"
		}
		line("Tasks", kinds)
		if n.GetReplicaId() != "" {
			line("Replica", n.GetReplicaId())
		}
		line("Host UUID", orDash(n.GetHostUuid()))
		if h := r.GetHost(); h != nil {
			line("OS", orDash(h.GetOsPretty()))
			line("Kernel", orDash(h.GetKernel()))
			line("QEMU", orDash(h.GetQemuVersion()))
		}
		until := msTime(n.GetCertNotAfterUnixMs())
		line("Certificate", fmt.Sprintf("serial %s, until %s (%s)", orDash(n.GetCertSerial()), c.stamp(until), c.in(until)))
		line("Enrolled", c.stamp(msTime(n.GetEnrolledAtUnixMs())))
		if at := msTime(n.GetRevokedAtUnixMs()); !at.IsZero() || n.GetRevokeReason() != "" {
			line("Revoked", fmt.Sprintf("%s (%s)", c.stamp(at), orDash(n.GetRevokeReason())))
		}

		fmt.Fprintln(w, "\nCapabilities:")
		if len(r.GetCapabilities()) == 0 {
			fmt.Fprintln(w, "  none reported")
		}
		for _, cp := range r.GetCapabilities() {
			avail := "available"
			if !cp.GetAvailable() {
				avail = "unavailable"
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\n", cp.GetName(), avail, cp.GetDetail())
		}

		rep := r.GetLastReport()
		if rep == nil {
			fmt.Fprintln(w, "\nLast report: none yet")
		} else {
			at := msTime(r.GetLastReportUnixMs())
			fmt.Fprintf(w, "\nLast report (%s, %s):\n", c.stamp(at), c.ago(at))
			fmt.Fprintf(w, "  CPU:\t%.1f%%\n", rep.GetCpuPercent())
			fmt.Fprintf(w, "  Memory:\t%s available of %s\n", bytesIEC(rep.GetMemAvailableBytes()), bytesIEC(rep.GetMemTotalBytes()))
			accel := orDash(rep.GetAcceleration())
			if rep.GetAccelerationReason() != "" {
				accel += " (" + rep.GetAccelerationReason() + ")"
			}
			fmt.Fprintf(w, "  Acceleration:\t%s\n", accel)
			if wc := rep.GetWorstCheck(); wc != nil {
				fmt.Fprintf(w, "  Worst check:\t%s %s: %s\n", wc.GetStatus(), wc.GetId(), wc.GetDetail())
			}
			vc := rep.GetVmCounts()
			fmt.Fprintf(w, "  VMs:\t%d running, %d stopped, %d paused, %d other; %d external, %d orphaned\n",
				vc.GetRunning(), vc.GetStopped(), vc.GetPaused(), vc.GetOther(), vc.GetExternal(), vc.GetOrphaned())
		}

		fmt.Fprintln(w, "\nVMs:")
		if len(r.GetVms()) == 0 {
			fmt.Fprintln(w, "  none reported")
			return nil
		}
		fmt.Fprintln(w, "  NAME\tUID\tCLASS\tPHASE")
		for _, v := range r.GetVms() {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", orDash(v.GetName()), orDash(v.GetUid()), orDash(v.GetClass()),
				cmp.Or(v.GetDisplayPhase(), v.GetPhase(), "-"))
		}
		return nil
	})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// bytesIEC prints a byte count in the largest binary unit: 7.6 GiB.
func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// matchNode finds ref among nodes: an exact id, else an exact hostname,
// else a unique id prefix. Several nodes with the hostname, or several
// ids with the prefix, is ambiguous: the operator names one by id.
func matchNode(nodes []*directorv1.NodeInfo, ref string) (*directorv1.NodeInfo, error) {
	var byName, byPrefix []*directorv1.NodeInfo
	for _, n := range nodes {
		switch {
		case n.GetId() == ref:
			return n, nil
		case n.GetHostname() == ref:
			byName = append(byName, n)
		case strings.HasPrefix(n.GetId(), strings.ToLower(ref)):
			byPrefix = append(byPrefix, n)
		}
	}
	pick := func(found []*directorv1.NodeInfo, what string) (*directorv1.NodeInfo, error) {
		if len(found) == 1 {
			return found[0], nil
		}
		ids := make([]string, 0, len(found))
		for _, n := range sortNodes(found) {
			ids = append(ids, n.GetId())
		}
		return nil, &UsageError{fmt.Errorf("node %q: %d nodes have that %s (%s): name one by its id", ref, len(found), what, strings.Join(ids, ", "))}
	}
	switch {
	case len(byName) > 0:
		return pick(byName, "hostname")
	case len(byPrefix) > 0 && len(ref) >= 4:
		return pick(byPrefix, "id prefix")
	}
	return nil, fmt.Errorf("node %q: %w (virt-director node list)", ref, errNodeNotFound)
}
