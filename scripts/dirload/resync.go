package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	"github.com/virtcon/virtcon/api/directorv1"
	"github.com/virtcon/virtcon/api/directorv1/directorv1connect"
	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/loadgen"
)

// runResync: n agents × vms VMs on one director with its embedded etcd;
// once ListVMs counts them all, the director is killed -9, its etcd data
// removed and it is started again on the same data dir and port
// (recovery.json restores the CA and the nodes); the agents reconnect by
// themselves and answer the Resync. Figure: restart to the count back.
func runResync(ctx context.Context, bin string, n, vms int) (err error) {
	const target = 30 * time.Second
	tmp, clean, err := tempDir("dirload-resync")
	if err != nil {
		return err
	}
	defer clean(&err)
	data := filepath.Join(tmp, "data")
	addr, err := loopback()
	if err != nil {
		return err
	}
	logPath := filepath.Join(tmp, "director.log")
	d, err := startDirector(ctx, bin, data, addr, logPath)
	if err != nil {
		return err
	}
	defer func() {
		if d != nil {
			d.stop()
		}
	}()
	admin := adminOf(data)
	ids, err := enrolAll(ctx, admin, n)
	if err != nil {
		return fmt.Errorf("resync: enrol: %w", err)
	}
	fmt.Fprintf(os.Stderr, "dirload: resync: %d agents enrolled\n", n)
	var st loadgen.Stats
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		loadgen.SessionsWith(sctx, addr, "127.0.0.1", ids, loadgen.Options{Period: 10 * time.Second, VMs: vms}, &st)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	want := n * vms
	t0 := time.Now()
	reasked0, err := waitCount(ctx, admin, &st, 0, n, want, 5*time.Minute)
	if err != nil {
		return fmt.Errorf("resync: first inventories: %w", err)
	}
	first := time.Since(t0)
	// recovery.json is refreshed every 5 s: wait until it names every node
	if err := waitFor(ctx, "resync: recovery.json with every node", time.Minute, 500*time.Millisecond, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(data, director.RecoveryFileName))
		if err != nil {
			return false, err
		}
		var r struct {
			Nodes map[string]json.RawMessage `json:"nodes"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return false, err
		}
		return len(r.Nodes) >= n, nil
	}); err != nil {
		return err
	}
	d.kill()
	if err := os.RemoveAll(filepath.Join(data, "etcd")); err != nil {
		return err
	}
	regs0, res0 := st.Registered.Load(), st.Resyncs.Load()
	restart := time.Now()
	if d, err = startDirector(ctx, bin, data, addr, logPath); err != nil {
		return fmt.Errorf("resync: restart: %w", err)
	}
	serving := time.Since(restart)
	reasked, err := waitCount(ctx, admin, &st, res0, n, want, 3*time.Minute)
	if err != nil {
		return fmt.Errorf("resync: after the restart: %w", err)
	}
	took := time.Since(restart)
	fmt.Printf("%-44s %8.2f s   target < %.0f s (%.2fx the target); serving %.2f s after the start; %d sessions registered again, %d inventories sent; %d nodes asked again with node resync (their inventory write had failed in the director); the first resync took %.2f s (%d asked again); load average %s (shared machine)\n",
		fmt.Sprintf("resync %d nodes x %d VMs after etcd data loss", n, vms), took.Seconds(), target.Seconds(), took.Seconds()/target.Seconds(),
		serving.Seconds(), st.Registered.Load()-regs0, st.Resyncs.Load()-res0, reasked, first.Seconds(), reasked0, loadavg())
	return nil
}

// waitCount waits until ListVMs counts want VMs. ListVMs reads every
// inventory (about 10 MB at 1000 x 50), so it is asked only once every
// agent has sent an inventory (Resyncs past res0 reach n), then once a
// second, so that the polling does not load the store it measures. When
// the count stands still for 5 s below want, the nodes listed without an
// inventory are asked again (ResyncNode, as `virt-director node resync`
// does): a director whose inventory write failed (etcd too slow) drops
// it. It returns how many such nodes it asked.
func waitCount(ctx context.Context, admin directorv1connect.AdminServiceClient, st *loadgen.Stats, res0 int64, n, want int, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	if err := waitFor(ctx, "every agent's inventory sent", within, 50*time.Millisecond, func() (bool, error) {
		return st.Resyncs.Load()-res0 >= int64(n), nil
	}); err != nil {
		return 0, fmt.Errorf("%w (%d of %d)", err, st.Resyncs.Load()-res0, n)
	}
	asked, last, since := 0, -1, time.Now()
	var lastErr error
	for time.Now().Before(deadline) {
		ctx1, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := admin.ListVMs(ctx1, connect.NewRequest(&directorv1.ListVMsRequest{CountOnly: true}))
		cancel()
		if err == nil {
			c := int(r.Msg.GetCount())
			if c == want {
				return asked, nil
			}
			if c != last {
				last, since = c, time.Now()
			} else if time.Since(since) > 5*time.Second {
				for _, node := range r.Msg.GetNodesWithoutInventory() {
					if _, err := admin.ResyncNode(ctx, connect.NewRequest(&directorv1.ResyncNodeRequest{Id: node})); err == nil {
						asked++
					}
				}
				since = time.Now()
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return asked, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return asked, fmt.Errorf("ListVMs count %d, want %d, after %v (%d nodes asked again; last error: %v)", last, want, within, asked, lastErr)
}
