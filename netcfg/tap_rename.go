package netcfg

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// RenameTAP renames a virtcon TAP, in use or not (a VM's NICs move down
// one index when one before them is hot-unplugged, and so do their TAPs).
// The kernel renames only a link that is down: it is set down, renamed
// and set up again, a blip of the NIC's link that the guest may notice;
// its bridge port and the QEMU holding it stay. A link that is not ours,
// or a target name taken, is refused and nothing changes.
func RenameTAP(ctx context.Context, from, to string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tap %s: rename: %w", from, err)
	}
	if err := tapCheckName(to); err != nil {
		return err
	}
	link, err := netlink.LinkByName(from)
	if err != nil {
		return fmt.Errorf("tap %s: rename: %w", from, err)
	}
	if !tapIsOurs(link) {
		return fmt.Errorf("tap %s: rename: %w", from, ErrTAPNotOurs)
	}
	var notFound netlink.LinkNotFoundError
	if _, err := netlink.LinkByName(to); !errors.As(err, &notFound) {
		return fmt.Errorf("tap %s: rename to %s: the name is taken (%v)", from, to, err)
	}
	up := link.Attrs().Flags&net.FlagUp != 0
	if up {
		if err := netlink.LinkSetDown(link); err != nil {
			return fmt.Errorf("tap %s: rename: set down: %w", from, err)
		}
	}
	if err := netlink.LinkSetName(link, to); err != nil {
		if up {
			netlink.LinkSetUp(link)
		}
		return fmt.Errorf("tap %s: rename to %s: %w", from, to, err)
	}
	if up {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("tap %s (was %s): set up: %w", to, from, err)
		}
	}
	return nil
}
