package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	directorv1 "github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/host"
)

// leaveTimeout bounds the Leave call.
const leaveTimeout = 20 * time.Second

// Leave takes the host out of its director: it asks the director to
// revoke the node (the Leave RPC, with the node's certificate), then
// deletes the local credentials and the alert. With local it only
// deletes them, telling the director nothing (for a director that is
// gone: the node stays listed there until an admin revokes or forgets
// it). A director that already refuses the credential (revoked, expired)
// is no obstacle. The agent must not be running (ErrRunning). VMs are
// untouched either way.
func Leave(ctx context.Context, h *host.Host, local bool) error {
	return leave(ctx, h, local, nil)
}

func leave(ctx context.Context, h *host.Host, local bool, dial DialFunc) error {
	l := h.Layout
	lock, err := tryLock(l)
	if err != nil {
		return err
	}
	defer lock.Release()
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !local {
		id, err := loadIdentity(l)
		if err != nil {
			return err
		}
		if err := leaveAny(ctx, log, id, dial); err != nil {
			return err
		}
	}
	if err := removeCredentials(l); err != nil {
		return fmt.Errorf("leave: delete the credentials under %s: %w", l.AgentDir(), err)
	}
	return nil
}

// leaveAny tells the director the node leaves, over the first of its
// addresses that answers (a replica that is down is no obstacle while
// another is up).
func leaveAny(ctx context.Context, log *slog.Logger, id *identity, dial DialFunc) error {
	var errs []error
	for _, addr := range id.cfg.Addrs() {
		err := leaveAt(ctx, id, addr, dial)
		if kind, _ := refusal(err, id, time.Now()); err != nil && kind == "" {
			errs = append(errs, fmt.Errorf("director %s: %w", addr, err))
			continue
		} else if err != nil {
			log.Info("the director already refuses this node's credential; deleting it here", "director", addr, "err", err)
		}
		log.Info("left the director", "director", addr, "node", id.cfg.NodeID)
		return nil
	}
	return fmt.Errorf("leave as node %s: %w", id.cfg.NodeID, errors.Join(errs...))
}

func leaveAt(ctx context.Context, id *identity, addr string, dial DialFunc) error {
	client, tr := newClient(id.mtlsConfig(time.Now, hostOf(addr)), dial)
	defer tr.CloseIdleConnections()
	ac := directorv1connect.NewAgentServiceClient(client, baseURL(addr), clientOptions()...)
	cctx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	_, err := ac.Leave(cctx, connect.NewRequest(&directorv1.LeaveRequest{Reason: "virt agent leave"}))
	return err
}
