package directorcli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/internal/duration"
	"github.com/virtcon/virtcon/internal/output"
)

func newTokenCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke join tokens",
		Long: `A join token lets one host enrol (or --uses hosts): the host runs
virt agent enroll with the join string token create prints. The join string
carries the token's secret and the director CA's pin; it is printed once, by
token create, and the director keeps only a hash of the secret.`,
	}
	cmd.AddCommand(newTokenCreateCmd(env), newTokenListCmd(env), newTokenRevokeCmd(env))
	return cmd
}

// tokenCreateOptions are token create's flags.
type tokenCreateOptions struct {
	TTL      time.Duration
	NodeName string
	Uses     uint32
	Address  string
}

// validate checks the flags before anything is asked of the director.
func (o *tokenCreateOptions) validate() error {
	// the director's own bounds, checked here too so that a bad flag is
	// named as the flag
	switch {
	case o.TTL < director.MinTokenTTL || o.TTL > director.MaxTokenTTL:
		return &UsageError{fmt.Errorf("--ttl %s: want %s to %s (a join token is for an enrolment about to happen)",
			o.TTL, short(director.MinTokenTTL), short(director.MaxTokenTTL))}
	case o.Uses < 1:
		return &UsageError{errors.New("--uses 0: a token must allow at least 1 enrolment")}
	case o.Uses > director.MaxTokenUses:
		return &UsageError{fmt.Errorf("--uses %d: at most %d", o.Uses, director.MaxTokenUses)}
	}
	if o.NodeName != "" && !director.ValidNodeName(o.NodeName) {
		return &UsageError{fmt.Errorf("--node-name %q: not a hostname (labels of letters, digits and inner '-', at most 253 characters)", o.NodeName)}
	}
	if o.Address != "" {
		if err := checkHostPort(o.Address); err != nil {
			return &UsageError{fmt.Errorf("--address %q: %w", o.Address, err)}
		}
	}
	return nil
}

// checkHostPort accepts HOST:PORT, an IPv6 host in brackets.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want HOST:PORT ([IPv6]:PORT for an IPv6 address)")
	}
	if host == "" || strings.ContainsAny(host, " \t\r\n/@#") {
		return errors.New("want a host name or address before the port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want 1-65535", port)
	}
	return nil
}

// TokenCreated is token create's answer in JSON and YAML. JoinString
// carries the secret: this is the only output that ever holds it.
type TokenCreated struct {
	ID         string  `json:"id" yaml:"id"`
	JoinString string  `json:"joinString" yaml:"joinString"`
	ExpiresAt  *string `json:"expiresAt" yaml:"expiresAt"`
}

func newTokenCreateCmd(env *Env) *cobra.Command {
	o := &tokenCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a join token and print its join string, once",
		Long: `Create a join token and print its join string once, to stdout: save it to a
file and give it to the host (virt agent enroll < FILE). It is never shown again;
token list names the token by its id only. With -o json|yaml the answer is
{id, joinString, expiresAt}.

The join string's address is the director's --advertise (serve), or --address.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			res, err := env.Admin().CreateToken(cmd.Context(), connect.NewRequest(&directorv1.CreateTokenRequest{
				TtlMs: o.TTL.Milliseconds(), NodeName: o.NodeName, MaxUses: o.Uses, Address: o.Address,
			}))
			if err != nil {
				return env.wordError("token create", err)
			}
			return renderTokenCreated(env.IO.Out, env.IO.ErrOut, env.Output, res.Msg, env.clock())
		},
	}
	fl := cmd.Flags()
	fl.Var(duration.NewValue(&o.TTL, time.Hour), "ttl", "how long the token may be used (a duration: 30m, 1h; 1m to 24h)")
	fl.StringVar(&o.NodeName, "node-name", "", "only the host with this `HOSTNAME` may use it")
	fl.Uint32Var(&o.Uses, "uses", 1, "how many hosts may enrol with it")
	fl.StringVar(&o.Address, "address", "", "the director's `HOST:PORT` in the join string (default: serve's --advertise)")
	return cmd
}

// renderTokenCreated prints the join string once: to out, alone on its
// line (table) or in {id, joinString, expiresAt}; the hint goes to errOut
// and never carries it.
func renderTokenCreated(out, errOut io.Writer, format string, r *directorv1.CreateTokenResponse, c clock) error {
	expires := msTime(r.GetExpiresAtUnixMs())
	data := TokenCreated{ID: r.GetId(), JoinString: r.GetJoinString(), ExpiresAt: rfc3339(expires)}
	if err := render(out, format, data, func(w io.Writer) error {
		_, err := fmt.Fprintln(w, r.GetJoinString())
		return err
	}); err != nil {
		return err
	}
	if format == output.Table {
		fmt.Fprintf(errOut, "virt-director: token %s: give it to the host: virt agent enroll < FILE; it expires at %s (%s)\n",
			r.GetId(), c.stamp(expires), c.in(expires))
	}
	return nil
}

// Token is a join token as token list prints it in JSON and YAML.
type Token struct {
	ID          string   `json:"id" yaml:"id"`
	State       string   `json:"state" yaml:"state"` // active, used, expired or revoked
	CreatedAt   *string  `json:"createdAt" yaml:"createdAt"`
	ExpiresAt   *string  `json:"expiresAt" yaml:"expiresAt"`
	Uses        uint32   `json:"uses" yaml:"uses"`
	MaxUses     uint32   `json:"maxUses" yaml:"maxUses"`
	NodeName    string   `json:"nodeName" yaml:"nodeName"`
	CreatedBy   string   `json:"createdBy" yaml:"createdBy"`
	UsedByNodes []string `json:"usedByNodes" yaml:"usedByNodes"`
}

func tokenView(t *directorv1.TokenInfo) Token {
	used := t.GetUsedByNodes()
	if used == nil {
		used = []string{}
	}
	return Token{ID: t.GetId(), State: t.GetState(), CreatedAt: rfc3339(msTime(t.GetCreatedAtUnixMs())),
		ExpiresAt: rfc3339(msTime(t.GetExpiresAtUnixMs())), Uses: t.GetUses(), MaxUses: t.GetMaxUses(),
		NodeName: t.GetNodeName(), CreatedBy: t.GetCreatedBy(), UsedByNodes: used}
}

func renderTokenList(w io.Writer, format string, tokens []*directorv1.TokenInfo, c clock) error {
	views := make([]Token, 0, len(tokens))
	for _, t := range tokens {
		views = append(views, tokenView(t))
	}
	return render(w, format, views, func(w io.Writer) error {
		fmt.Fprintln(w, "ID\tSTATE\tUSES\tEXPIRES\tNODE NAME\tCREATED BY\tUSED BY")
		for _, t := range tokens {
			exp := msTime(t.GetExpiresAtUnixMs())
			when := c.stamp(exp)
			if t.GetState() == "active" {
				when += " (" + c.in(exp) + ")"
			}
			used := make([]string, 0, len(t.GetUsedByNodes()))
			for _, n := range t.GetUsedByNodes() {
				used = append(used, shortID(n))
			}
			fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", t.GetId(), orDash(t.GetState()), t.GetUses(), t.GetMaxUses(), when,
				orDash(t.GetNodeName()), orDash(t.GetCreatedBy()), orDash(strings.Join(used, ",")))
		}
		return nil
	})
}

func newTokenListCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List join tokens (by id: their secrets are not kept)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := env.Admin().ListTokens(cmd.Context(), connect.NewRequest(&directorv1.ListTokensRequest{}))
			if err != nil {
				return env.wordError("token list", err)
			}
			return renderTokenList(env.IO.Out, env.Output, res.Msg.GetTokens(), env.clock())
		},
	}
}

// checkTokenID refuses anything but a token id without quoting it: an
// operator may paste the whole token or join string, secret and all.
func checkTokenID(id string) error {
	if strings.HasPrefix(id, enroll.JoinPrefix) || strings.Contains(id, ".") {
		return &UsageError{errors.New("token revoke: give the token's id (token list), not the token or join string: the secret is never needed here, and it may now be in your shell history (revoke that token)")}
	}
	if len(id) != enroll.IDLen || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return &UsageError{fmt.Errorf("token revoke: a token id is %d characters a-z0-9 (token list)", enroll.IDLen)}
	}
	return nil
}

func newTokenRevokeCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a join token: no host can enrol with it any more",
		Long: `Revoke a join token by its id (token list). Hosts already enrolled with it are
not affected: revoke those with node revoke.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTokenID(args[0]); err != nil {
				return err
			}
			res, err := env.Admin().RevokeToken(cmd.Context(), connect.NewRequest(&directorv1.RevokeTokenRequest{Id: args[0]}))
			if err != nil {
				return env.wordError("token revoke "+args[0], err)
			}
			t := res.Msg.GetToken()
			if t == nil {
				t = &directorv1.TokenInfo{Id: args[0], State: "revoked"}
			}
			return render(env.IO.Out, env.Output, tokenView(t), func(w io.Writer) error {
				fmt.Fprintf(w, "token %s revoked\n", t.GetId())
				return nil
			})
		},
	}
}
