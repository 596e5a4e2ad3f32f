package server

import (
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mccr-dev/mccr/internal/shard"
)

// coordinator is a sharded Server's part in the replicas' agreement
// (internal/shard). It tells the cluster records what to run through
// shardMembers, and they never call it.
type coordinator struct{ *shard.Coordinator }

func newCoordinator(host manager.Manager, o ShardingOptions, clusters *registry, log logr.Logger) (*coordinator, error) {
	// A client of its own, without a rate limit shared with the host's
	// controllers: they must never hold up this replica's heartbeat.
	cfg := rest.CopyConfig(host.GetConfig())
	cfg.RateLimiter, cfg.QPS, cfg.Burst = nil, 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	co := shard.New(cs.CoordinationV1().Leases(o.Namespace), shardMembers{clusters}, shard.Options{
		Identity: o.Identity, Namespace: o.Namespace, Group: o.Group,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		LoadFactor: o.LoadFactor, Pins: o.Pins,
		Logger:  log.WithName("sharding"),
		Metrics: shardSeries{replica: o.Identity},
		Events:  host.GetEventRecorder("mccr-sharding"),
	})
	return &coordinator{co}, nil
}

// shardMembers is the fleet as the coordinator sees it: the names of the
// cluster records, and own/disown on them.
type shardMembers struct{ clusters *registry }

// Names gives each record as its own identity: a name deleted and added
// again between two of the coordinator's steps has a new record (the old
// one retired once its Manager stopped), which starts not local and must
// be told afresh whether it runs here and who runs it.
func (m shardMembers) Names() []shard.Member {
	all := m.clusters.all()
	names := make([]shard.Member, 0, len(all))
	for _, cl := range all {
		if cl.known() {
			names = append(names, shard.Member{Name: cl.name, Record: cl})
		}
	}
	return names
}

func (m shardMembers) Own(name string) {
	if cl := m.clusters.get(name); cl != nil {
		cl.own()
	}
}

func (m shardMembers) Disown(name, owner string) <-chan struct{} {
	if cl := m.clusters.get(name); cl != nil {
		return cl.disown(owner)
	}
	return closedChan
}

func (m shardMembers) StopAll() {
	for _, cl := range m.clusters.all() {
		cl.disownIfLocal()
	}
}
