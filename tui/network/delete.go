package network

import (
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/virtcon/virtcon/netcfg"
	"github.com/virtcon/virtcon/tui/common"
	"github.com/virtcon/virtcon/tui/styles"
)

// deleteDialog asks before deleting a bridge: y goes on to the review of
// the change, any other key cancels.
type deleteDialog struct {
	*shared
	size
	name string // the bridge
}

var _ part = (*deleteDialog)(nil)

// Capturing: the question takes every key.
func (d *deleteDialog) Capturing() bool { return true }

// CLI is the delete of the bridge.
func (d *deleteDialog) CLI() string { return "virt net bridge delete " + d.name + tryFlag() }

// ShortHelp is the confirmation's legend.
func (d *deleteDialog) ShortHelp() []key.Binding { return common.ConfirmHelp("delete, then review") }

// Update answers the question.
func (d *deleteDialog) Update(msg tea.KeyPressMsg) (intent, tea.Cmd) {
	if !common.Confirmed(msg) {
		d.say(styles.Info, "cancelled: nothing changed")
		return toOverview{}, nil
	}
	next, err := netcfg.DeleteBridge(d.desired, d.name)
	if err != nil {
		d.say(styles.Failure, "%v", err)
		return toOverview{}, nil
	}
	return toReview{base: d.desired, next: next, what: "delete bridge " + d.name,
		cli: "virt net bridge delete " + d.name + tryFlag()}, nil
}

// Lines draws the question.
func (d *deleteDialog) Lines() []string {
	s := d.c.Styles
	return []string{
		s.Badgef(styles.Warning) + " " + s.Title.Render("Delete bridge "+d.clean(d.name)+"?"), "",
		"It is removed from the host and from network.yaml; its ports are released.",
		"VMs attached to it lose their network. You review the change next.", "",
		common.ConfirmPrompt(s, "delete it and review the change"),
	}
}
