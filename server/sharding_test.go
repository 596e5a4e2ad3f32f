package server_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// shardWitness counts, per cluster name, the member Managers running it in any
// replica of the process, and remembers every instant two did.
type shardWitness struct {
	mu      sync.Mutex
	running map[string]map[string]bool // cluster → replicas running it
	doubles []string
}

func (w *shardWitness) setup(replica string) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error {
		return mgr.Add(managerRunnable(func(ctx context.Context) error {
			name, _ := known.ClusterFrom(ctx)
			w.mu.Lock()
			if w.running[name] == nil {
				w.running[name] = map[string]bool{}
			}
			for other := range w.running[name] {
				w.doubles = append(w.doubles, fmt.Sprintf("%s on %s while on %s", name, replica, other))
			}
			w.running[name][replica] = true
			w.mu.Unlock()
			<-ctx.Done()
			w.mu.Lock()
			delete(w.running[name], replica)
			w.mu.Unlock()
			return nil
		}))
	}
}

// owners returns, per cluster, the replicas running it.
func (w *shardWitness) owners() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for name, rs := range w.running {
		for r := range rs {
			out[name] = append(out[name], r)
		}
	}
	return out
}

// TestShardingSplitsTheFleet runs three replicas of one program in this
// process, sharing 12 clusters: each cluster runs on exactly one replica,
// the others say who runs it, a replica that stops gracefully hands its
// clusters over, and one that joins takes its share — never two Managers of
// one cluster at once.
func TestShardingSplitsTheFleet(t *testing.T) {
	ns := testNamespace(t)
	w := &shardWitness{running: map[string]map[string]bool{}}
	names := make([]string, 0, 12)
	for i := range 12 {
		names = append(names, fmt.Sprintf("fleet/c%02d", i))
	}
	type replica struct {
		srv  *server.Server
		stop func() error
	}
	start := func(id string) replica {
		srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
			Logger:                 test.Logger(t).WithValues("replica", id),
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		}, server.WithSharding(server.ShardingOptions{
			Identity: id, Namespace: ns, Group: "shard-test",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		}))
		if err != nil {
			t.Fatal(err)
		}
		srv.AddReconcilerSetup(w.setup(id))
		for i, n := range names {
			if err := srv.Add(config.NewNamedConfig(n, fleet.Cluster(members[i%len(members)]).Config)); err != nil {
				t.Fatal(err)
			}
		}
		return replica{srv, test.Run(t, srv)}
	}
	settled := func(live map[string]replica) {
		t.Helper()
		test.Eventually(t, 30*time.Second, "every cluster on exactly one live replica", func() bool {
			owners := w.owners()
			for _, n := range names {
				if len(owners[n]) != 1 || live[owners[n][0]].srv == nil {
					return false
				}
			}
			return true
		})
	}
	replicas := map[string]replica{}
	for _, id := range []string{"r1", "r2", "r3"} {
		replicas[id] = start(id)
	}
	settled(replicas)
	load := map[string]int{}
	for _, rs := range w.owners() {
		load[rs[0]]++
	}
	t.Logf("figure: sharding in process: 12 clusters over 3 replicas: %v", load)
	for id, n := range load {
		if n > 5 { // ceil(1.25 × 12 / 3)
			t.Errorf("%s runs %d clusters, over ceil(1.25 × average) = 5", id, n)
		}
	}

	// Each replica knows who runs the others' clusters.
	owners := w.owners()
	for id, r := range replicas {
		for _, n := range names {
			st, err := r.srv.Status(n)
			if err != nil {
				t.Fatal(err)
			}
			mine := owners[n][0] == id
			switch {
			case mine && (st.Phase != server.PhaseReady || st.Owner != ""):
				t.Errorf("%s: own cluster %s is %s (owner %q)", id, n, st.Phase, st.Owner)
			case !mine && (st.Phase != server.PhaseElsewhere || st.Owner != owners[n][0]):
				t.Errorf("%s: %s is %s owned by %q, want Elsewhere owned by %s", id, n, st.Phase, st.Owner, owners[n][0])
			}
			var cm corev1.ConfigMap
			err = r.srv.GetClient().Get(known.WithCluster(t.Context(), n), mcclientKey(ns, "none"), &cm)
			if !mine && !errors.Is(err, mcclient.ErrClusterElsewhere) {
				t.Errorf("%s: Get in %s run by %s: %v, want ErrClusterElsewhere", id, n, owners[n][0], err)
			}
		}
		var list corev1.ConfigMapList
		if err := r.srv.GetClient().List(t.Context(), &list); err != nil {
			t.Errorf("%s: fleet-wide List over its own clusters: %v", id, err)
		}
	}

	// A graceful stop hands r2's clusters over.
	if err := replicas["r2"].stop(); err != nil {
		t.Fatal(err)
	}
	delete(replicas, "r2")
	settled(replicas)

	// A fourth replica takes its share.
	before := w.owners()
	replicas["r4"] = start("r4")
	test.Eventually(t, 30*time.Second, "r4 runs its share", func() bool {
		n := 0
		for _, rs := range w.owners() {
			if len(rs) == 1 && rs[0] == "r4" {
				n++
			}
		}
		return n >= 3
	})
	settled(replicas)
	moved := 0
	for n, rs := range w.owners() {
		if before[n][0] != rs[0] {
			moved++
		}
	}
	t.Logf("figure: sharding in process: a third replica joining two moved %d of 12 clusters", moved)
	if moved == 0 || moved > 6 {
		t.Errorf("a joining replica moved %d of 12 clusters", moved)
	}
	for _, r := range replicas {
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.doubles) > 0 {
		t.Errorf("a cluster ran on two replicas at once: %v", w.doubles)
	}
}

func mcclientKey(ns, name string) crclient.ObjectKey {
	return crclient.ObjectKey{Namespace: ns, Name: name}
}
