package dcui

import (
	"log/slog"

	"github.com/virtcon/virtcon/paths"
	"github.com/virtcon/virtcon/tui/app"
	"github.com/virtcon/virtcon/tui/common"
)

// livePages builds the screens after login over the real core. self is
// this executable (virt is looked up next to it for the VM console).
func livePages(c common.Common, layout paths.Layout, log *slog.Logger, self, root string) []app.Page {
	return nil
}
