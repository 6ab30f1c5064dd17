package directorcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/output"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
)

// AuditEntry is an audit log entry as virt-director prints it in JSON
// and YAML.
type AuditEntry struct {
	Time    *string `json:"time" yaml:"time"`
	Kind    string  `json:"kind" yaml:"kind"`
	TokenID string  `json:"tokenId" yaml:"tokenId"`
	NodeID  string  `json:"nodeId" yaml:"nodeId"`
	Serial  string  `json:"serial" yaml:"serial"`
	Source  string  `json:"source" yaml:"source"`
	Actor   string  `json:"actor" yaml:"actor"`
	Detail  string  `json:"detail" yaml:"detail"`
}

func auditView(e *directorv1.AuditEntry) AuditEntry {
	return AuditEntry{Time: rfc3339(msTime(e.GetTimeUnixMs())), Kind: e.GetKind(), TokenID: e.GetTokenId(), NodeID: e.GetNodeId(),
		Serial: e.GetSerial(), Source: e.GetSource(), Actor: e.GetActor(), Detail: e.GetDetail()}
}

// auditLine is an entry in the table view: one line, like a log, so that
// --follow prints the same lines as a plain listing.
func auditLine(e *directorv1.AuditEntry, c clock) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-14s", c.stamp(msTime(e.GetTimeUnixMs())), e.GetKind())
	for _, kv := range [][2]string{{"node", e.GetNodeId()}, {"token", e.GetTokenId()}, {"serial", e.GetSerial()},
		{"actor", e.GetActor()}, {"source", e.GetSource()}, {"detail", e.GetDetail()}} {
		if kv[1] == "" {
			continue
		}
		v := kv[1]
		if strings.ContainsAny(v, " \t\"=") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", kv[0], v)
	}
	return strings.TrimRight(b.String(), " ")
}

func renderAudit(w io.Writer, format string, entries []*directorv1.AuditEntry, c clock) error {
	views := make([]AuditEntry, 0, len(entries))
	for _, e := range entries {
		views = append(views, auditView(e))
	}
	if format == output.Table {
		tw := output.TextOnly(w)
		for _, e := range entries {
			if _, err := fmt.Fprintln(tw, auditLine(e, c)); err != nil {
				return err
			}
		}
		return nil
	}
	return render(w, format, views, nil)
}

// auditStream prints followed entries one at a time: table lines, JSON
// Lines (one object a line) or YAML documents.
type auditStream struct {
	w      io.Writer
	format string
	c      clock
	yaml   *yaml.Encoder
}

func (s *auditStream) write(e *directorv1.AuditEntry) error {
	switch s.format {
	case output.JSON:
		b, err := json.Marshal(auditView(e))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(s.w, "%s\n", b)
		return err
	case output.YAML:
		if s.yaml == nil {
			s.yaml = yaml.NewEncoder(s.w)
			s.yaml.SetIndent(2)
		}
		return s.yaml.Encode(auditView(e))
	default:
		_, err := fmt.Fprintln(output.TextOnly(s.w), auditLine(e, s.c))
		return err
	}
}

func (s *auditStream) close() error {
	if s.yaml != nil {
		return s.yaml.Close()
	}
	return nil
}

// parseSince reads --since: an RFC 3339 time, or a duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := duration.Parse(s)
	if err != nil {
		return time.Time{}, &UsageError{fmt.Errorf("--since %q: want a duration back from now (90m, 24h) or an RFC 3339 time (2026-09-01T12:00:00Z)", s)}
	}
	return now.Add(-d), nil
}

type auditOptions struct {
	Since  string
	Limit  int
	Follow bool
}

func newAuditCmd(env *Env) *cobra.Command {
	o := &auditOptions{}
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Print the director's audit log (--follow: and what it records next)",
		Long: `Print the audit log: token creation, use, failure, expiry and revocation,
certificates issued, renewed and revoked, sessions opened and closed, nodes
revoked, forgotten and left, replayed enrolments. No entry holds a secret.
The table is one line an entry; -o json is an array (with --follow one object a
line, JSON Lines), -o yaml a list (with --follow one document an entry).
--follow keeps printing new entries until interrupted (exit 0).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			since, err := parseSince(o.Since, env.now())
			if err != nil {
				return err
			}
			if o.Limit < 0 {
				return &UsageError{fmt.Errorf("--limit %d: must not be negative (0: the director's default)", o.Limit)}
			}
			return env.audit(cmd.Context(), since, uint32(o.Limit), o.Follow)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Since, "since", "", "only entries since `WHEN`: a duration back from now (24h) or an RFC 3339 time")
	fl.IntVar(&o.Limit, "limit", 0, "at most `N` entries (0: the director's default)")
	fl.BoolVarP(&o.Follow, "follow", "f", false, "keep printing new entries until interrupted")
	return cmd
}

func (e *Env) audit(ctx context.Context, since time.Time, limit uint32, follow bool) error {
	admin := e.Admin()
	req := &directorv1.ListAuditRequest{Limit: limit}
	if !since.IsZero() {
		req.SinceUnixMs = since.UnixMilli()
	}
	if !follow {
		res, err := admin.ListAudit(ctx, connect.NewRequest(req))
		if err != nil {
			return e.wordError("audit", err)
		}
		return renderAudit(e.IO.Out, e.Output, res.Msg.GetEntries(), e.clock())
	}

	// Follow first, then list: an entry recorded in between comes on the
	// stream, and one on both is printed once.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := admin.FollowAudit(ctx, connect.NewRequest(&directorv1.FollowAuditRequest{}))
	if err != nil {
		return e.followEnd(ctx, err)
	}
	defer stream.Close()
	// the director sends the stream's headers once it watches the log:
	// waiting for them leaves no gap before the listing
	stream.ResponseHeader()
	res, err := admin.ListAudit(ctx, connect.NewRequest(req))
	if err != nil {
		return e.wordError("audit", err)
	}
	out := &auditStream{w: e.IO.Out, format: e.Output, c: e.clock()}
	defer out.close()
	listed := res.Msg.GetEntries()
	var last int64
	for _, en := range listed {
		if err := out.write(en); err != nil {
			return err
		}
		last = max(last, en.GetTimeUnixMs())
	}
	for stream.Receive() {
		en := stream.Msg()
		if en.GetTimeUnixMs() < last || en.GetTimeUnixMs() == last && listedHas(listed, en) {
			continue
		}
		if err := out.write(en); err != nil {
			return err
		}
	}
	return e.followEnd(ctx, stream.Err())
}

// followEnd is how a follow ends: interrupted is done (nil), a director
// that went away is an error.
func (e *Env) followEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		return errors.New("audit --follow: the director ended the stream (stopped?)")
	}
	return e.wordError("audit --follow", err)
}

func listedHas(listed []*directorv1.AuditEntry, en *directorv1.AuditEntry) bool {
	for _, l := range listed {
		if proto.Equal(l, en) {
			return true
		}
	}
	return false
}
