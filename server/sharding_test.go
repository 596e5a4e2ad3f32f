package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/shard"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// shardWitness counts, per cluster name, the member Managers running it in any
// replica of the process, and remembers every instant two did.
type shardWitness struct {
	mu      sync.Mutex
	running map[string]map[string]bool // cluster → replicas running it
	starts  map[string]int             // replica → member starts so far
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
			if w.starts == nil {
				w.starts = map[string]int{}
			}
			w.starts[replica]++
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

// shardHarness runs replicas of one sharded program in this process, all
// given the same clusters, with a witness of who runs what.
type shardHarness struct {
	t     *testing.T
	ns    string
	names []string
	w     *shardWitness
}

type replica struct {
	srv  *server.Server
	stop func() error
}

func newShardHarness(t *testing.T, clusters int) *shardHarness {
	h := &shardHarness{t: t, ns: testNamespace(t), w: &shardWitness{running: map[string]map[string]bool{}}}
	for i := range clusters {
		h.names = append(h.names, fmt.Sprintf("fleet/c%02d", i))
	}
	return h
}

// start runs replica id; wrap, if set, wraps its host transport (faults).
func (h *shardHarness) start(id string, wrap func(http.RoundTripper) http.RoundTripper) replica {
	t := h.t
	cfg := rest.CopyConfig(fleet.Cluster("host").Config)
	cfg.WrapTransport = wrap
	srv, err := server.NewServer(cfg, ctrl.Options{
		Logger:                 test.Logger(t).WithValues("replica", id),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{h.ns: {}}},
		// Under LeaseDuration − RenewDeadline, as sharding requires.
		GracefulShutdownTimeout: ptr.To(500 * time.Millisecond),
	}, server.WithSharding(server.ShardingOptions{
		Identity: id, Namespace: h.ns, Group: "shard-test",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv.AddReconcilerSetup(h.w.setup(id))
	for i, n := range h.names {
		if err := srv.Add(config.NewNamedConfig(n, fleet.Cluster(members[i%len(members)]).Config)); err != nil {
			t.Fatal(err)
		}
	}
	return replica{srv, test.Run(t, srv)}
}

// settled waits until every cluster runs on exactly one of live.
func (h *shardHarness) settled(live map[string]replica) {
	h.t.Helper()
	test.Eventually(h.t, 30*time.Second, "every cluster on exactly one live replica", func() bool {
		owners := h.w.owners()
		for _, n := range h.names {
			if len(owners[n]) != 1 || live[owners[n][0]].srv == nil {
				return false
			}
		}
		return true
	})
}

// noDoubles fails the test if a cluster ever ran on two replicas at once.
func (h *shardHarness) noDoubles() {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if len(h.w.doubles) > 0 {
		h.t.Errorf("a cluster ran on two replicas at once: %v", h.w.doubles)
	}
}

// TestShardingSplitsTheFleet runs three replicas of one program in this
// process, sharing 12 clusters: each cluster runs on exactly one replica,
// the others say who runs it, a replica that stops gracefully hands its
// clusters over, and one that joins takes its share — never two Managers of
// one cluster at once.
func TestShardingSplitsTheFleet(t *testing.T) {
	h := newShardHarness(t, 12)
	ns, names, w := h.ns, h.names, h.w
	start := func(id string) replica { return h.start(id, nil) }
	settled := h.settled
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
	h.noDoubles()
}

func mcclientKey(ns, name string) crclient.ObjectKey {
	return crclient.ObjectKey{Namespace: ns, Name: name}
}

// leaseFaults cuts a replica off from the Leases, or loses the answers to
// cluster Lease writes (they land, the replica sees an error).
type leaseFaults struct{ mode atomic.Int32 }

const (
	faultNone int32 = iota
	faultCut
	faultLoseAnswers
)

func (f *leaseFaults) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if !strings.Contains(req.URL.Path, "/leases") {
			return next.RoundTrip(req)
		}
		switch f.mode.Load() {
		case faultCut:
			return nil, errors.New("test: cut off from the Leases")
		case faultLoseAnswers:
			// Writes of cluster Leases (creates, and updates of
			// "<group>-c-…"): the replica's own heartbeat still works.
			if req.Method == http.MethodPost || req.Method != http.MethodGet && strings.Contains(req.URL.Path, "-c-") {
				resp, err := next.RoundTrip(req)
				if err == nil {
					_ = resp.Body.Close()
				}
				return nil, errors.New("test: answer lost")
			}
		}
		return next.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestShardingReplicaCutOff: a replica that can no longer renew its Lease
// stops its clusters before the other takes them over, and takes its share
// back once it can renew again — never two Managers of a cluster at once.
func TestShardingReplicaCutOff(t *testing.T) {
	h := newShardHarness(t, 8)
	var faults leaseFaults
	replicas := map[string]replica{"a": h.start("a", faults.wrap), "b": h.start("b", nil)}
	h.settled(replicas)
	onA := func() int {
		n := 0
		for _, rs := range h.w.owners() {
			if slices.Contains(rs, "a") {
				n++
			}
		}
		return n
	}
	if onA() == 0 {
		t.Fatal("replica a runs nothing: the cut below would prove nothing")
	}
	cut := time.Now()
	faults.mode.Store(faultCut)
	test.Eventually(t, 30*time.Second, "a stops its clusters", func() bool { return onA() == 0 })
	stopped := time.Since(cut)
	h.settled(map[string]replica{"b": replicas["b"]})
	t.Logf("figure: sharding in process: replica cut off: its clusters stopped after %s, all running elsewhere after %s (RenewDeadline 2s, LeaseDuration 3s)",
		stopped.Round(time.Millisecond), time.Since(cut).Round(time.Millisecond))

	faults.mode.Store(faultNone)
	test.Eventually(t, 30*time.Second, "a takes its share back", func() bool { return onA() > 0 })
	h.settled(replicas)
	h.noDoubles()
}

// TestShardingLostLeaseWrites: a replica whose cluster Lease writes land
// but whose answers are lost runs exactly the clusters whose Leases name it,
// and hands over those another replica is to run: nothing runs twice, and
// nothing runs nowhere.
func TestShardingLostLeaseWrites(t *testing.T) {
	h := newShardHarness(t, 8)
	var faults leaseFaults
	faults.mode.Store(faultLoseAnswers)
	replicas := map[string]replica{"a": h.start("a", faults.wrap)}
	h.settled(replicas)
	replicas["b"] = h.start("b", nil)
	test.Eventually(t, 30*time.Second, "b runs its share", func() bool {
		for _, rs := range h.w.owners() {
			if slices.Contains(rs, "b") {
				return true
			}
		}
		return false
	})
	h.settled(replicas)
	for _, id := range []string{"a", "b"} {
		for _, n := range h.names {
			st, err := replicas[id].srv.Status(n)
			if err != nil {
				t.Fatal(err)
			}
			runs := slices.Contains(h.w.owners()[n], id)
			if runs != (st.Phase == server.PhaseReady) {
				t.Errorf("%s: %s is %s on it while it runs there: %v", id, n, st.Phase, runs)
			}
		}
	}
	h.noDoubles()
}

// TestShardingLeaseDeletedByHand: a replica whose Lease is deleted under it
// (by hand, or by a clean-up job) creates it again at its next renewal,
// well within the lease duration the others wait before they take its
// clusters: nothing moves, nothing runs twice.
func TestShardingLeaseDeletedByHand(t *testing.T) {
	h := newShardHarness(t, 8)
	replicas := map[string]replica{"a": h.start("a", nil), "b": h.start("b", nil)}
	h.settled(replicas)
	host := adminClient(t, "host")
	var leases coordinationv1.LeaseList
	if err := host.List(t.Context(), &leases, crclient.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	var deleted *coordinationv1.Lease
	for i := range leases.Items {
		l := &leases.Items[i]
		if ptr.Deref(l.Spec.HolderIdentity, "") == "a" && l.Labels[shard.RoleLabel] == shard.RoleReplica {
			if err := host.Delete(t.Context(), l); err != nil {
				t.Fatal(err)
			}
			deleted = l
		}
	}
	if deleted == nil {
		t.Fatal("replica a has no Lease")
	}
	before := h.w.owners()
	test.Eventually(t, 10*time.Second, "a's Lease is back", func() bool {
		var l coordinationv1.Lease
		err := host.Get(t.Context(), crclient.ObjectKeyFromObject(deleted), &l)
		return err == nil && l.UID != deleted.UID
	})
	h.settled(replicas)
	for n, rs := range h.w.owners() {
		if before[n][0] != rs[0] {
			t.Errorf("%s moved from %s to %s", n, before[n][0], rs[0])
		}
	}
	h.noDoubles()
}
