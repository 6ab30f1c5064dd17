package netcfg

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
)

// Reapply applies the last applied configuration (AppliedFile) again, in
// the calling thread's network namespace: what a host that lost its links
// needs, above all one that has just booted (`virt host boot`). Bridges,
// VLANs, addresses and routes are planned against the live host as in any
// apply; every NAT network is ensured (its bridge, nftables chains and
// dnsmasq), and the management DHCP client started. It returns nil, nil
// when nothing was ever applied.
//
// It is not network.yaml that is applied: the desired file may hold an
// edit nobody applied (or a hand edit that does not admit), and a boot is
// no time to try one. The applied record was applied and kept (a try that
// was never confirmed has been rolled back first: ResolveExpiredTry), so
// the default-route rule, which guards a change made over the network
// from cutting its own session, is waived: the host had this network
// before it went down.
//
// It is idempotent: on a host that has its network, a second call runs no
// step and the Result says Changed false. The steps of NAT networks that
// were missing a part are described as "restore nat network ...", since
// Apply itself lists only networks that are new to the record.
func (s *Service) Reapply(ctx context.Context) (*Result, error) {
	cfg, err := LoadApplied(s.layout)
	if err != nil || cfg == nil {
		return nil, err
	}
	restored := s.natMissing(cfg)
	res, err := Apply(ctx, s.log, s.layout, cfg, ApplyOptions{AllowDefaultRouteChange: true})
	if err != nil {
		return nil, err
	}
	res.Steps = append(res.Steps, restored...)
	res.Changed = len(res.Steps) > 0
	return res, nil
}

// natMissing describes the NAT networks of cfg that lack a part now (the
// bridge, their nftables chains, a live dnsmasq): those the apply that
// follows restores. What cannot be read counts as missing.
func (s *Service) natMissing(cfg *Config) []string {
	var chains map[string]bool
	if c, err := nftables.New(); err == nil {
		chains, _ = nftOurChains(c)
	}
	var out []string
	for _, n := range cfg.Networks {
		if n.Type != NetworkNAT {
			continue
		}
		var missing []string
		if _, err := netlink.LinkByName(n.Bridge); err != nil {
			missing = append(missing, "bridge "+n.Bridge)
		}
		natChain, fwdChain := nftChainNames(n.Name)
		if !chains[natChain] || !chains[fwdChain] {
			missing = append(missing, "nftables chains")
		}
		if _, ok := dnsmasqRunning(natFilesFor(s.layout, n.Name)); !ok {
			missing = append(missing, "dnsmasq")
		}
		if len(missing) > 0 {
			out = append(out, fmt.Sprintf("restore nat network %s (%s)", n.Name, strings.Join(missing, ", ")))
		}
	}
	return out
}
