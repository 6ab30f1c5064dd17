package director

import (
	"context"
	"log/slog"

	"github.com/virtcon/virtcon/agent"
	"github.com/virtcon/virtcon/enroll"
	"github.com/virtcon/virtcon/host"
)

// LiveSources reads the node agent's files under the host's layout and
// enrols through the agent, as `virt agent status` and `virt agent
// enroll` do. The enrolment never skips the pin: the screen has no such
// option.
func LiveSources(h *host.Host, logger *slog.Logger) Sources {
	return Sources{
		Status: func() (*Status, error) { return agent.ReadStatus(h.Layout) },
		Enroll: func(ctx context.Context, j enroll.Join) (*Status, error) {
			return agent.Enroll(ctx, h, j, agent.EnrollOptions{Logger: logger})
		},
	}
}
