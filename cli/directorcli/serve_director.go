package directorcli

import (
	"context"
	"fmt"

	"github.com/virtcon/virtcon/director"
	"github.com/virtcon/virtcon/director/etcdstore"
)

// runDirector opens the director on --data, prints the ready line and
// serves until ctx ends.
func runDirector(ctx context.Context, env *Env, o *serveOptions) error {
	log := o.logger(env)
	d, err := director.Open(ctx, director.Options{
		DataDir:   env.DataDir,
		Listen:    o.Listen,
		Advertise: o.Advertise,
		Etcd: etcdstore.Options{
			Endpoints: o.EtcdEndpoints,
			CACert:    o.EtcdCACert, Cert: o.EtcdCert, Key: o.EtcdKey,
			Prefix: o.EtcdPrefix, RequestTimeout: o.EtcdRequestTimeout,
		},
		ReplicaID:         o.ReplicaID,
		TaskRetention:     o.TaskRetention,
		KEKFile:           o.KEKFile,
		NewCA:             o.NewCA,
		HeartbeatInterval: o.HeartbeatInterval,
		DegradedAfter:     o.DegradedAfter,
		OfflineAfter:      o.OfflineAfter,
		Logger:            log,
	})
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintf(env.IO.ErrOut, "virt-director: serving on %s, CA pin %s\n", d.Addr(), d.Pin())
	if err := d.Serve(ctx); err != nil {
		return err
	}
	return d.Close()
}
