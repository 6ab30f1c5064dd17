package netcfg

// nftables for nat networks, by netlink (github.com/google/nftables), never
// by nft(8). One table, "inet virtcon", holds two base chains per network,
// so removing a network removes exactly its chains:
//
//	chain nat-NAME { type nat hook postrouting priority srcnat; policy accept;
//	    meta nfproto ipv4 ip saddr SUBNET ip daddr != SUBNET oifname != "BRIDGE" masquerade comment "virtcon nat NAME: masquerade SUBNET" }
//	chain fwd-NAME { type filter hook forward priority filter; policy accept;
//	    iifname "BRIDGE" accept comment "virtcon nat NAME: accept from BRIDGE"
//	    oifname "BRIDGE" ct state established,related accept comment "virtcon nat NAME: accept replies to BRIDGE" }
//
// The comments carry every parameter of their rule, so comparing comments
// tells whether the rules are current. A firewall elsewhere that drops in
// its own forward chain still wins: nftables runs every base chain of a
// hook and a drop anywhere is final.

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/virtcon/virtcon/internal/flock"
	"github.com/virtcon/virtcon/paths"
)

// nftTableName is the nftables table (family inet) holding every nat network's
// chains.
const nftTableName = "virtcon"

func nftTable() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: nftTableName}
}

// nftChainNames are the chains of one network.
func nftChainNames(network string) (nat, fwd string) { return "nat-" + network, "fwd-" + network }

func nftChains(network string) (nat, fwd *nftables.Chain) {
	natName, fwdName := nftChainNames(network)
	t := nftTable()
	nat = &nftables.Chain{
		Name: natName, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	}
	fwd = &nftables.Chain{
		Name: fwdName, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter,
	}
	return nat, fwd
}

// nftRule is a rule to be: its comment and its expressions.
type nftRule struct {
	comment string
	exprs   []expr.Any
}

// nftNATRules are the rules of the nat chain and of the forward chain.
func nftNATRules(network, bridge string, subnet netip.Prefix) (nat, fwd []nftRule) {
	tag := "virtcon nat " + network + ": "
	net4 := subnet.Addr().As4()
	mask := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-subnet.Bits()))
	ipMatch := func(offset uint32, op expr.CmpOp) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
			&expr.Cmp{Op: op, Register: 1, Data: net4[:]},
		}
	}
	ifMatch := func(key expr.MetaKey, op expr.CmpOp) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: key, Register: 1},
			&expr.Cmp{Op: op, Register: 1, Data: nftIfname(bridge)},
		}
	}
	masq := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
	masq = append(masq, ipMatch(12, expr.CmpOpEq)...)  // ip saddr SUBNET
	masq = append(masq, ipMatch(16, expr.CmpOpNeq)...) // ip daddr != SUBNET
	// Not what leaves through the bridge: dnsmasq's own broadcasts, say.
	masq = append(masq, ifMatch(expr.MetaKeyOIFNAME, expr.CmpOpNeq)...)
	masq = append(masq, &expr.Masq{})
	nat = []nftRule{{comment: tag + "masquerade " + subnet.String(), exprs: masq}}

	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	from := append(ifMatch(expr.MetaKeyIIFNAME, expr.CmpOpEq), accept)
	replies := append(ifMatch(expr.MetaKeyOIFNAME, expr.CmpOpEq),
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED),
			Xor:  make([]byte, 4),
		},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		accept,
	)
	fwd = []nftRule{
		{comment: tag + "accept from " + bridge, exprs: from},
		{comment: tag + "accept replies to " + bridge, exprs: replies},
	}
	return nat, fwd
}

// nftIfname is an interface name as the kernel compares it: NUL padded to
// IFNAMSIZ.
func nftIfname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// nftComment is the comment of a rule, as nft(8) writes and reads it.
func nftComment(r *nftables.Rule) string {
	s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	return s
}

// nftLock serialises every change to the shared table, so one network's
// removal never deletes the table while another network adds chains to it.
func nftLock(ctx context.Context, layout paths.Layout) (*flock.Lock, error) {
	return flock.Acquire(ctx, filepath.Join(layout.RunDir(), "locks", "network-nftables.lock"))
}

// nftEnsureNAT makes the network's chains hold exactly its rules. When they
// already do, nothing is written; otherwise table, chains and rules are
// (re)written in one atomic batch: the chains are flushed and refilled, so
// rules never pile up and there is no moment without them. created says
// whether the chains did not exist before.
func nftEnsureNAT(ctx context.Context, log *slog.Logger, layout paths.Layout, network, bridge string, subnet netip.Prefix) (created bool, err error) {
	lock, err := nftLock(ctx, layout)
	if err != nil {
		return false, err
	}
	defer lock.Release()

	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	natChain, fwdChain := nftChains(network)
	natRules, fwdRules := nftNATRules(network, bridge, subnet)
	existing, err := nftOurChains(c)
	if err != nil {
		return false, err
	}
	current := true
	for _, want := range []struct {
		chain *nftables.Chain
		rules []nftRule
	}{{natChain, natRules}, {fwdChain, fwdRules}} {
		if !existing[want.chain.Name] {
			created, current = true, false
			continue
		}
		rules, err := c.GetRules(want.chain.Table, want.chain)
		if err != nil {
			return false, fmt.Errorf("nftables: list rules of %s: %w", want.chain.Name, err)
		}
		var have, wantComments []string
		for _, r := range rules {
			have = append(have, nftComment(r))
		}
		for _, r := range want.rules {
			wantComments = append(wantComments, r.comment)
		}
		if !slices.Equal(have, wantComments) {
			current = false
		}
	}
	if current {
		log.Debug("nftables rules current", "network", network)
		return false, nil
	}

	c.AddTable(nftTable())
	for _, ch := range []*nftables.Chain{natChain, fwdChain} {
		c.AddChain(ch)
		c.FlushChain(ch)
	}
	add := func(ch *nftables.Chain, rules []nftRule) {
		for _, r := range rules {
			c.AddRule(&nftables.Rule{
				Table: ch.Table, Chain: ch, Exprs: r.exprs,
				UserData: userdata.AppendString(nil, userdata.TypeComment, r.comment),
			})
		}
	}
	add(natChain, natRules)
	add(fwdChain, fwdRules)
	if err := c.Flush(); err != nil {
		return false, fmt.Errorf("nftables: write chains %s, %s: %w", natChain.Name, fwdChain.Name, err)
	}
	log.Info("wrote nftables rules", "network", network, "table", "inet "+nftTableName,
		"chains", []string{natChain.Name, fwdChain.Name})
	return created, nil
}

// nftOurChains lists the chains of the virtcon table, by name.
func nftOurChains(c *nftables.Conn) (map[string]bool, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nftables: list chains: %w", err)
	}
	names := map[string]bool{}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == nftTableName {
			names[ch.Name] = true
		}
	}
	return names, nil
}

// nftRemoveNAT deletes the network's chains, and the table once no chain is
// left in it. Other networks' chains are never touched.
func nftRemoveNAT(ctx context.Context, log *slog.Logger, layout paths.Layout, network string) error {
	lock, err := nftLock(ctx, layout)
	if err != nil {
		return err
	}
	defer lock.Release()

	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	existing, err := nftOurChains(c)
	if err != nil {
		return err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("nftables: list tables: %w", err)
	}
	haveTable := slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == nftTableName })
	if !haveTable {
		return nil
	}
	natChain, fwdChain := nftChains(network)
	var deleted []string
	for _, ch := range []*nftables.Chain{natChain, fwdChain} {
		if existing[ch.Name] {
			c.DelChain(ch)
			deleted = append(deleted, ch.Name)
			delete(existing, ch.Name)
		}
	}
	if len(existing) == 0 {
		c.DelTable(nftTable())
		deleted = append(deleted, "table inet "+nftTableName)
	}
	if len(deleted) == 0 {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: delete %v: %w", deleted, err)
	}
	log.Info("deleted nftables rules", "network", network, "deleted", deleted)
	return nil
}
