package server_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
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
// given the same clusters, with witnesses of who runs what: shardWitness
// (every start) and a test.OwnershipRecorder (overlaps and dark gaps).
type shardHarness struct {
	t     *testing.T
	ns    string
	names []string
	w     *shardWitness
	rec   *test.OwnershipRecorder
}

type replica struct {
	id    string
	srv   *server.Server
	stop  func() error
	proxy *test.FaultProxy // in front of the host, when asked for
	lines *logLines        // everything the replica logged
}

func newShardHarness(t *testing.T, clusters int) *shardHarness {
	h := &shardHarness{t: t, ns: testNamespace(t), w: &shardWitness{running: map[string]map[string]bool{}}, rec: &test.OwnershipRecorder{}}
	for i := range clusters {
		h.names = append(h.names, fmt.Sprintf("fleet/c%02d", i))
	}
	return h
}

// replicaSpec says how to run a replica; the zero value of each field is
// the harness's default.
type replicaSpec struct {
	id    string
	group string // default "shard-test"
	// lease, renew, retry: default 3s, 2s, 500ms.
	lease, renew, retry time.Duration
	// wrap wraps the replica's host transport (faults of its own).
	wrap func(http.RoundTripper) http.RoundTripper
	// proxy puts the host behind a test.FaultProxy of the replica's own.
	proxy bool
	// names are the clusters its sources give it; default all of the
	// harness's.
	names []string
	// loadFactor is its ShardingOptions.LoadFactor.
	loadFactor float64
}

// start runs replica id; wrap, if set, wraps its host transport (faults).
func (h *shardHarness) start(id string, wrap func(http.RoundTripper) http.RoundTripper) replica {
	return h.launch(replicaSpec{id: id, wrap: wrap})
}

// launch runs a replica as spec says.
func (h *shardHarness) launch(spec replicaSpec) replica {
	t := h.t
	r := replica{id: spec.id, lines: &logLines{}}
	cfg := rest.CopyConfig(fleet.Cluster("host").Config)
	if spec.proxy {
		r.proxy = test.NewFaultProxy(t, cfg)
		cfg = r.proxy.Config()
	}
	cfg.WrapTransport = spec.wrap
	sh := server.ShardingOptions{
		Identity: spec.id, Namespace: h.ns, Group: cmp.Or(spec.group, "shard-test"),
		LeaseDuration: cmp.Or(spec.lease, 3*time.Second), RenewDeadline: cmp.Or(spec.renew, 2*time.Second),
		RetryPeriod: cmp.Or(spec.retry, 500*time.Millisecond), LoadFactor: spec.loadFactor,
	}
	srv, err := server.NewServer(cfg, ctrl.Options{
		Logger:                 r.lines.logger(t).WithValues("replica", spec.id),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{h.ns: {}}},
		// Under LeaseDuration − RenewDeadline, as sharding requires.
		GracefulShutdownTimeout: ptr.To(500 * time.Millisecond),
	}, server.WithSharding(sh))
	if err != nil {
		t.Fatal(err)
	}
	srv.AddReconcilerSetup(h.w.setup(spec.id))
	srv.AddReconcilerSetup(h.rec.Setup(spec.id))
	for i, n := range h.names {
		if spec.names != nil && !slices.Contains(spec.names, n) {
			continue
		}
		if err := srv.Add(config.NewNamedConfig(n, fleet.Cluster(members[i%len(members)]).Config)); err != nil {
			t.Fatal(err)
		}
	}
	r.srv, r.stop = srv, test.Run(t, srv)
	return r
}

// logLines keeps what a replica logged, to count lines of a kind.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

// logger writes to t's log until t's cleanup, like test.Logger, and keeps
// every line.
func (l *logLines) logger(t *testing.T) logr.Logger {
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	return funcr.New(func(prefix, args string) {
		line := prefix + " " + args
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
		if !done.Load() {
			t.Log(line)
		}
	}, funcr.Options{Verbosity: 1})
}

// count returns how many lines contain s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// owned reports whether every cluster runs on exactly one replica, one of
// ids.
func (h *shardHarness) owned(ids ...string) bool {
	for _, n := range h.names {
		o := h.rec.Owners(n)
		if len(o) != 1 || !slices.Contains(ids, o[0]) {
			return false
		}
	}
	return true
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

// agreed reports whether every replica's Status says what the recorder
// saw: its own clusters Ready, the others Elsewhere with their runner as
// owner. Handovers go on for a moment after the loads first look right.
func agreed(replicas map[string]replica, names []string, owners map[string][]string) bool {
	for id, r := range replicas {
		for _, n := range names {
			st, err := r.srv.Status(n)
			if err != nil || len(owners[n]) != 1 {
				return false
			}
			if owners[n][0] == id {
				if st.Phase != server.PhaseReady || st.Owner != "" {
					return false
				}
			} else if st.Phase != server.PhaseElsewhere || st.Owner != owners[n][0] {
				return false
			}
		}
	}
	return true
}

// TestShardingSplitsTheFleet runs three replicas of one program in this
// process, sharing 12 clusters: each cluster runs on exactly one replica,
// the others say who runs it, a replica that stops gracefully hands its
// clusters over, and one that joins takes its share — never two Managers of
// one cluster at once.
func TestShardingSplitsTheFleet(t *testing.T) {
	h := newShardHarness(t, 12)
	// After the harness made its namespace: the kit's admin clients and
	// their connections outlive the test.
	ignore := goleak.IgnoreCurrent()
	ns, names, w := h.ns, h.names, h.w
	start := func(id string) replica { return h.start(id, nil) }
	settled := h.settled
	replicas := map[string]replica{}
	for _, id := range []string{"r1", "r2", "r3"} {
		replicas[id] = start(id)
	}
	settled(replicas)
	// The first to join takes everything, and hands over as the others
	// come: wait for the assignment of three.
	load := map[string]int{}
	var owners map[string][]string // of the snapshot that settled
	test.Eventually(t, 30*time.Second, "each replica runs its share", func() bool {
		clear(load)
		owners = w.owners()
		for _, rs := range owners {
			if len(rs) == 1 {
				load[rs[0]]++
			}
		}
		return len(load) == 3 && load["r1"]+load["r2"]+load["r3"] == 12 && max(load["r1"], load["r2"], load["r3"]) <= 5 &&
			agreed(replicas, names, owners)
	})
	t.Logf("figure: sharding in process: 12 clusters over 3 replicas: %v", load)
	for id, n := range load {
		if n > 5 { // ceil(1.25 × 12 / 3)
			t.Errorf("%s runs %d clusters, over ceil(1.25 × average) = 5", id, n)
		}
	}

	// Each replica knows who runs the others' clusters.
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
			if mine {
				continue
			}
			// Another replica's cluster: a read fails at once with
			// ErrClusterElsewhere naming the cluster and its owner, and a
			// write is not sent.
			ctx := known.WithCluster(t.Context(), n)
			var cm corev1.ConfigMap
			err = r.srv.GetClient().Get(ctx, mcclientKey(ns, "none"), &cm)
			if !errors.Is(err, mcclient.ErrClusterElsewhere) || !strings.Contains(err.Error(), strconv.Quote(owners[n][0])) || !strings.Contains(err.Error(), strconv.Quote(n)) {
				t.Errorf("%s: Get in %s run by %s: %v, want ErrClusterElsewhere naming both", id, n, owners[n][0], err)
			}
			if ee, ok := errors.AsType[*mcclient.ElsewhereError](err); !ok || ee.Cluster != n || ee.Owner != owners[n][0] {
				t.Errorf("%s: Get in %s run by %s: %v, want an *ElsewhereError naming both", id, n, owners[n][0], err)
			}
			write := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere-" + id}}
			if err := r.srv.GetClient().Create(ctx, write); !errors.Is(err, mcclient.ErrClusterElsewhere) {
				t.Errorf("%s: Create in %s run by %s: %v, want ErrClusterElsewhere", id, n, owners[n][0], err)
			}
		}
		for _, m := range members {
			err := adminClient(t, m).Get(t.Context(), mcclientKey(ns, "elsewhere-"+id), &corev1.ConfigMap{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("%s: a write aimed at another replica's cluster reached %s: %v", id, m, err)
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
	// Every replica handed over and stopped: nothing of it is left.
	leakcheck.VerifyNone(t, ignore)
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

// soak reports whether the long versions of the fault tests run
// (MCCR_SOAK=1, make soak).
func soak() bool { return os.Getenv("MCCR_SOAK") != "" }

// darkAfter returns, over a report's clusters, the longest time a cluster
// ran nowhere after instant back.
func darkAfter(rep test.OwnershipReport, back time.Time) time.Duration {
	var worst time.Duration
	for _, c := range rep.Clusters {
		for _, d := range c.Dark {
			if d.To.After(back) {
				worst = max(worst, d.To.Sub(later(d.From, back)))
			}
		}
	}
	return worst
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestShardingHostOutage takes the host API server away from two replicas
// (LeaseDuration 8s, RenewDeadline 4s) that split 4 clusters — killed, so
// that calls are refused, or behind a frozen proxy, so that they hang —
// and brings it back. Over the whole run no cluster may run on two
// replicas, and every cluster must run again within RenewDeadline + 2s of
// the host answering; the replicas log a line when renewals start failing,
// one per 30 s while they do, and one on recovery.
func TestShardingHostOutage(t *testing.T) {
	type tc struct {
		outage time.Duration
		mode   string // refused: the API server is killed; hung: frozen proxies; lost: proxies lose every answer
	}
	cases := []tc{{12 * time.Second, "refused"}, {40 * time.Second, "refused"}, {12 * time.Second, "hung"}, {40 * time.Second, "hung"}, {12 * time.Second, "lost"}}
	if soak() {
		cases = append(cases, tc{5 * time.Minute, "refused"}, tc{5 * time.Minute, "hung"}, tc{time.Minute, "lost"})
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s %s", c.mode, c.outage), func(t *testing.T) { shardHostOutage(t, c.outage, c.mode) })
	}
}

func shardHostOutage(t *testing.T, outage time.Duration, mode string) {
	proxied := mode != "refused"
	const lease, renew, retry = 8 * time.Second, 4 * time.Second, 2 * time.Second
	h := newShardHarness(t, 4)
	spec := func(id string) replicaSpec {
		return replicaSpec{id: id, lease: lease, renew: renew, retry: retry, proxy: proxied}
	}
	a, b := h.launch(spec("a")), h.launch(spec("b"))
	test.Eventually(t, 60*time.Second, "both replicas run clusters", func() bool {
		return h.owned("a", "b") && len(h.rec.Owners(h.names[0])) == 1 && slices.ContainsFunc(h.names, func(n string) bool { return h.rec.Owners(n)[0] == "a" }) &&
			slices.ContainsFunc(h.names, func(n string) bool { return h.rec.Owners(n)[0] == "b" })
	})
	from := time.Now()
	host := fleet.Cluster("host")
	for _, r := range []replica{a, b} {
		var err error
		switch mode {
		case "hung":
			err = r.proxy.Freeze()
		case "lost":
			err = r.proxy.LoseAnswers()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !proxied {
		if err := host.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(outage) // the fault's length, not an assertion
	if proxied {
		for _, r := range []replica{a, b} {
			if err := r.proxy.Pass(); err != nil {
				t.Fatal(err)
			}
		}
	}
	back := time.Now()
	if !proxied {
		// The host answers some time before StartAPIServer returns: time
		// from its first answer.
		answered := firstAnswer(t, host.Config)
		if err := host.StartAPIServer(t.Context()); err != nil {
			t.Fatal(err)
		}
		back = <-answered
	}
	test.Eventually(t, 60*time.Second, "every cluster runs again", func() bool { return h.owned("a", "b") })
	running := time.Since(back)
	// Watch it for a while: nothing may move or run twice.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
	}
	rep := h.rec.Report(from, time.Now(), h.names...)
	dark := darkAfter(rep, back)
	lines := map[string]int{}
	for _, r := range []replica{a, b} {
		lines[r.id] = r.lines.count("cannot renew") + r.lines.count("renewing this replica's Lease again")
	}
	t.Logf("figure: sharding host outage, %s for %s: every cluster running again %s after the host answered (longest dark after it %s, RenewDeadline %s); overlap %s; renewal lines %v; conflict lines a %d, b %d",
		mode, outage, running.Round(time.Millisecond), dark.Round(time.Millisecond), renew,
		overlap(rep), lines, a.lines.count("has been modified"), b.lines.count("has been modified"))
	if err := rep.Check(time.Hour); err != nil {
		t.Error(err)
	}
	if c := rep.Clusters[0]; len(c.Dark) == 0 || c.Dark[0].From.Sub(from) > renew+time.Second {
		t.Errorf("%s did not stop within RenewDeadline of the outage\n%s", c.Cluster, rep)
	}
	if dark > renew+2*time.Second {
		t.Errorf("clusters ran nowhere for %s after the host answered, over RenewDeadline + 2s\n%s", dark, rep)
	}
	for id, n := range lines {
		if limit := 2 + int(outage/(30*time.Second)); n > limit {
			t.Errorf("%s logged %d lines about renewals over a %s outage, want at most %d", id, n, outage, limit)
		}
	}
	for _, r := range []replica{a, b} {
		if err := r.stop(); err != nil {
			t.Error(err)
		}
	}
}

// firstAnswer polls the API server cfg reaches with what the replicas ask
// (Leases) until it answers, and sends the time it first did.
func firstAnswer(t *testing.T, cfg *rest.Config) <-chan time.Time {
	out := make(chan time.Time, 1)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := cs.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{Limit: 1})
			cancel()
			if err == nil {
				out <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return out
}

func overlap(rep test.OwnershipReport) time.Duration {
	var d time.Duration
	for _, c := range rep.Clusters {
		d += c.OverlapTotal
	}
	return d
}

// TestShardingDifferentTimings: during a rolling update that changes the
// timings, replica a declares 30s/20s and b 6s/3s. a's host connection
// hangs: b must wait the 30 s a declared before taking a's clusters, while
// a stops them at its own 20 s — never both at once.
func TestShardingDifferentTimings(t *testing.T) {
	h := newShardHarness(t, 4)
	a := h.launch(replicaSpec{id: "a", lease: 30 * time.Second, renew: 20 * time.Second, retry: 2 * time.Second, proxy: true})
	b := h.launch(replicaSpec{id: "b", lease: 6 * time.Second, renew: 3 * time.Second, retry: time.Second})
	onA := func() int {
		n := 0
		for _, name := range h.names {
			if slices.Contains(h.rec.Owners(name), "a") {
				n++
			}
		}
		return n
	}
	test.Eventually(t, 60*time.Second, "both run clusters", func() bool { return h.owned("a", "b") && onA() > 0 && onA() < len(h.names) })
	from := time.Now()
	if err := a.proxy.Freeze(); err != nil {
		t.Fatal(err)
	}
	var aStopped time.Duration
	test.Eventually(t, 60*time.Second, "b runs every cluster", func() bool {
		if aStopped == 0 && onA() == 0 {
			aStopped = time.Since(from)
		}
		return h.owned("b")
	})
	bTook := time.Since(from)
	rep := h.rec.Report(from, time.Now(), h.names...)
	t.Logf("figure: sharding different timings: a (30s/20s) hung: a stopped its clusters after %s, b (6s/3s) ran them all after %s; overlap %s",
		aStopped.Round(time.Millisecond), bTook.Round(time.Millisecond), overlap(rep))
	if err := rep.Check(time.Hour); err != nil {
		t.Error(err)
	}
	if err := a.proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []replica{a, b} {
		if err := r.stop(); err != nil {
			t.Error(err)
		}
	}
}

// TestShardingDistinctGroups: two programs share a namespace and cluster
// names, their Groups differing only past 40 characters, in case, or in
// punctuation. Each must run every cluster of its own: their Leases never
// meet.
func TestShardingDistinctGroups(t *testing.T) {
	long := "a-rather-long-group-name-for-the-controller"
	for _, pair := range [][2]string{{long + "-eu", long + "-us"}, {"a.b", "a-b"}, {"Fleet", "fleet"}} {
		t.Run(pair[0]+" vs "+pair[1], func(t *testing.T) {
			h := newShardHarness(t, 8)
			p := h.launch(replicaSpec{id: "p", group: pair[0]})
			q := h.launch(replicaSpec{id: "q", group: pair[1]})
			both := func() bool {
				for _, n := range h.names {
					if !slices.Equal(h.rec.Owners(n), []string{"p", "q"}) {
						return false
					}
				}
				return true
			}
			test.Eventually(t, 60*time.Second, "each program runs every cluster", both)
			from := time.Now()
			for end := from.Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				if !both() {
					t.Fatalf("the programs' clusters moved: %v", h.rec.Report(from, time.Now(), h.names...))
				}
			}
			for _, r := range []replica{p, q} {
				if err := r.stop(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestShardingNeedsAGroupAndANamespace: a sharded Server whose Group
// nothing names is refused, so that two programs never split one fleet
// under one default; and so is one whose Leases' namespace nothing names
// out of a Pod. In a Pod, the namespace defaults to the Pod's, as
// controller-runtime's leader election does: two installs of one program
// in two namespaces never share Leases.
func TestShardingNeedsAGroupAndANamespace(t *testing.T) {
	server.SetInClusterNamespaceFile(t, filepath.Join(t.TempDir(), "none"))
	opts := func(id, ns string) ctrl.Options {
		return ctrl.Options{
			Metrics: metricsserver.Options{BindAddress: "0"}, GracefulShutdownTimeout: ptr.To(time.Second),
			LeaderElectionID: id, LeaderElectionNamespace: ns,
		}
	}
	_, err := server.NewServer(fleet.Cluster("host").Config, opts("", "ops"), server.WithSharding(server.ShardingOptions{}))
	if !errors.Is(err, server.ErrNoShardGroup) {
		t.Errorf("NewServer without a Group: %v, want ErrNoShardGroup", err)
	}
	_, err = server.NewServer(fleet.Cluster("host").Config, opts("my-controller", ""), server.WithSharding(server.ShardingOptions{}))
	if !errors.Is(err, server.ErrNoShardNamespace) {
		t.Errorf("NewServer out of a Pod without a namespace: %v, want ErrNoShardNamespace", err)
	}
	for _, tc := range []struct{ name, electionNS, podNS, sharding, want string }{
		{name: "LeaderElectionNamespace", electionNS: "ops", podNS: "team-a\n", want: "ops"},
		{name: "Pod", podNS: "team-a\n", want: "team-a"},
		{name: "ShardingOptions", electionNS: "ops", podNS: "team-a", sharding: "leases", want: "leases"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "namespace")
			if err := os.WriteFile(file, []byte(tc.podNS), 0o600); err != nil {
				t.Fatal(err)
			}
			server.SetInClusterNamespaceFile(t, file)
			srv, err := server.NewServer(fleet.Cluster("host").Config, opts("my-controller", tc.electionNS),
				server.WithSharding(server.ShardingOptions{Namespace: tc.sharding}))
			if err != nil {
				t.Fatal(err)
			}
			if got := server.ShardingNamespace(srv); got != tc.want {
				t.Errorf("the Leases' namespace is %q, want %q", got, tc.want)
			}
		})
	}
}

// TestShardingHostileClusterLease: a cluster's Lease names a holder no
// replica is, as a restored backup or a GitOps tool leaves it. The replica
// takes it only once it has stood for the duration it declares, and when
// the copy is applied again and again over the Lease it holds, goes on
// running the cluster: it starts at most twice in all.
func TestShardingHostileClusterLease(t *testing.T) {
	h := newShardHarness(t, 2)
	name := h.names[0]
	host := adminClient(t, "host")
	copyOf := func(l *coordinationv1.Lease) {
		l.Labels = map[string]string{shard.GroupLabel: shard.GroupKey("shard-test"), shard.RoleLabel: shard.RoleCluster}
		l.Annotations = map[string]string{shard.GroupAnnotation: "shard-test", shard.ClusterAnnotation: name, shard.WriterAnnotation: "restored"}
		l.Spec = coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To(int32(10)),
			RenewTime: &metav1.MicroTime{Time: time.Now().Add(-time.Hour)},
		}
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: shard.ClusterLeaseName("shard-test", name), Namespace: h.ns}}
	copyOf(l)
	if err := host.Create(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	a := h.launch(replicaSpec{id: "a"})
	test.Eventually(t, 60*time.Second, "a runs every cluster", func() bool { return h.owned("a") })
	took := h.rec.Report(from, time.Now(), name).Clusters[0].Owned[0].From.Sub(from)
	// A GitOps tool applies its copy every 2 s for 20 s.
	for range 10 {
		var cur coordinationv1.Lease
		if err := host.Get(t.Context(), crclient.ObjectKeyFromObject(l), &cur); err != nil {
			t.Fatal(err)
		}
		copyOf(&cur)
		if err := host.Update(t.Context(), &cur); err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the tool's period
	}
	test.Eventually(t, 30*time.Second, "a runs the cluster", func() bool { return h.owned("a") })
	rep := h.rec.Report(from, time.Now(), name)
	t.Logf("figure: sharding hostile cluster Lease: taken %s after the replica started (declared 10 s); starts over 10 re-applies: %d", took.Round(time.Millisecond), rep.Clusters[0].Starts)
	if took < 10*time.Second {
		t.Errorf("a took a Lease another holder held after %s, before its declared 10 s", took)
	}
	if n := rep.Clusters[0].Starts; n > 2 {
		t.Errorf("the cluster started %d times, want at most 2\n%s", n, rep)
	}
	if err := a.stop(); err != nil {
		t.Error(err)
	}
}

// TestShardingDuplicateIdentity: two processes run with one identity (a
// copied Deployment). Both say so — an error line, a Warning event on the
// Lease, mccr_shard_duplicate_identity, a failing ShardingReadyCheck — and
// run nothing until alone; no cluster runs twice for longer than a lease
// duration. Once one is gone, the other runs its share again.
func TestShardingDuplicateIdentity(t *testing.T) {
	h := newShardHarness(t, 6)
	a := h.launch(replicaSpec{id: "a"})
	x1 := h.launch(replicaSpec{id: "x"})
	test.Eventually(t, 60*time.Second, "a and x run clusters", func() bool {
		return h.owned("a", "x") && slices.ContainsFunc(h.names, func(n string) bool { return h.rec.Owners(n)[0] == "x" })
	})
	from := time.Now()
	x2 := h.launch(replicaSpec{id: "x"})
	ready := func(r replica) error { return r.srv.ShardingReadyCheck()(nil) }
	test.Eventually(t, 30*time.Second, "both processes of x see the other", func() bool { return ready(x1) != nil && ready(x2) != nil })
	detected := time.Since(from)
	test.Eventually(t, 30*time.Second, "a runs every cluster", func() bool { return h.owned("a") })
	for i, r := range []replica{x1, x2} {
		if r.lines.count("duplicate replica identity") == 0 {
			t.Errorf("process %d of x logged nothing", i+1)
		}
	}
	if v := metricValue(t, "mccr_shard_duplicate_identity", "replica", "x"); v != 1 {
		t.Errorf("mccr_shard_duplicate_identity{replica=x} = %v, want 1", v)
	}
	test.Eventually(t, 30*time.Second, "a Warning event on x's Lease", func() bool {
		var evs eventsv1.EventList
		if err := adminClient(t, "host").List(t.Context(), &evs, crclient.InNamespace(h.ns)); err != nil {
			return false
		}
		return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
			return e.Reason == "DuplicateIdentity" && e.Regarding.Name == shard.ReplicaLeaseName("shard-test", "x")
		})
	})
	rep := h.rec.Report(from, time.Now(), h.names...)
	t.Logf("figure: sharding duplicate identity: both processes reported it %s after the second started; overlap %s", detected.Round(time.Millisecond), overlap(rep))
	for _, c := range rep.Clusters {
		if c.OverlapTotal > 3*time.Second {
			t.Errorf("%s ran twice for %s, over a lease duration", c.Cluster, c.OverlapTotal)
		}
	}
	if err := x2.stop(); err != nil {
		t.Error(err)
	}
	test.Eventually(t, 30*time.Second, "x alone runs its share again", func() bool {
		return ready(x1) == nil && h.owned("a", "x") && slices.ContainsFunc(h.names, func(n string) bool { return h.rec.Owners(n)[0] == "x" })
	})
	for _, r := range []replica{a, x1} {
		if err := r.stop(); err != nil {
			t.Error(err)
		}
	}
}

// TestShardingHandoverPastAReplicaWithoutTheCluster: replica c's cluster
// source lacks some clusters the others have (it lags behind theirs, or a
// rolling update changed it), so to c their Leases are those of clusters
// that left the fleet. a runs them; then a stops gracefully, releasing
// their Leases for b, or is cut off from the host, leaving them to b once
// its Lease expired. b's writes of cluster Leases are slow (0.3 s). c must
// not delete those Leases under b: b, which saw them held and finds them
// gone, would wait out a's lease duration once more.
func TestShardingHandoverPastAReplicaWithoutTheCluster(t *testing.T) {
	const lease, renew, retry = 16 * time.Second, 4 * time.Second, time.Second
	for _, how := range []string{"leave", "cut"} {
		t.Run(how, func(t *testing.T) {
			h := newShardHarness(t, 8)
			// The clusters of a's, with c running too, that are b's once a
			// is gone: c knows none of them.
			with := shard.Assign(shard.Input{Replicas: []string{"a", "b", "c"}, Names: h.names})
			without := shard.Assign(shard.Input{Replicas: []string{"b", "c"}, Names: h.names})
			var moving, rest []string
			for _, n := range h.names {
				if with[n] == "a" && without[n] == "b" {
					moving = append(moving, n)
				} else {
					rest = append(rest, n)
				}
			}
			if len(moving) == 0 {
				t.Fatalf("no cluster goes from a to b: %v, then %v", with, without)
			}
			var faults leaseFaults
			var slow atomic.Bool
			slow.Store(true)
			slowWrites := slowClusterLeaseWrites(&slow, 300*time.Millisecond)
			spec := replicaSpec{lease: lease, renew: renew, retry: retry}
			a := h.launch(withID(spec, "a", faults.wrap, nil))
			h.launch(withID(spec, "b", slowWrites, nil))
			h.launch(withID(spec, "c", nil, rest))
			onlyOn := func(id string) bool {
				owners := h.w.owners()
				for _, n := range moving {
					if !slices.Equal(owners[n], []string{id}) {
						return false
					}
				}
				return true
			}
			test.Eventually(t, 60*time.Second, "a runs "+strings.Join(moving, ", "), func() bool { return onlyOn("a") })
			from := time.Now()
			limit := lease / 2
			switch how {
			case "leave":
				if err := a.stop(); err != nil {
					t.Fatal(err)
				}
			case "cut":
				faults.mode.Store(faultCut)
				limit = lease + lease/2
			}
			test.Eventually(t, 4*lease, "b runs "+strings.Join(moving, ", "), func() bool { return onlyOn("b") })
			took := time.Since(from)
			slow.Store(false) // b hands over at once as the test ends
			t.Logf("figure: sharding in process: a's clusters ran on b %s after a's %s (LeaseDuration %s)", took.Round(time.Millisecond), how, lease)
			if took > limit {
				t.Errorf("after a's %s, its clusters ran nowhere for %s, over %s: c deleted their Leases under b", how, took.Round(time.Millisecond), limit)
			}
			h.noDoubles()
		})
	}
}

// withID is spec for replica id, with wrap and names.
func withID(spec replicaSpec, id string, wrap func(http.RoundTripper) http.RoundTripper, names []string) replicaSpec {
	spec.id, spec.wrap, spec.names = id, wrap, names
	return spec
}

// TestShardingLoadFactorsThatDiffer: during a rolling update that changes
// ShardingOptions.LoadFactor, replica a bounds loads by 1 and b by 2. By
// its own bound each would leave some clusters to the other, which gives
// them back; every cluster must run, on exactly one replica.
func TestShardingLoadFactorsThatDiffer(t *testing.T) {
	h := newShardHarness(t, 8)
	replicas := map[string]replica{
		"a": h.launch(replicaSpec{id: "a", loadFactor: 1}),
		"b": h.launch(replicaSpec{id: "b", loadFactor: 2}),
	}
	test.Eventually(t, 60*time.Second, "every cluster runs on exactly one of a and b, each running some", func() bool {
		load := map[string]int{}
		for _, rs := range h.w.owners() {
			if len(rs) == 1 {
				load[rs[0]]++
			}
		}
		return h.owned("a", "b") && load["a"] > 0 && load["b"] > 0
	})
	h.settled(replicas)
	h.noDoubles()
}

// slowClusterLeaseWrites wraps a replica's transport so that, while slow
// is set, each write of a cluster Lease waits d before it is sent.
func slowClusterLeaseWrites(slow *atomic.Bool, d time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if slow.Load() && req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/leases/") && strings.Contains(path.Base(req.URL.Path), "-c-") {
				select {
				case <-time.After(d):
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
			}
			return next.RoundTrip(req)
		})
	}
}

// TestShardingStopHandsOverOnASlowHost: a replica stops while its host
// answers every write of a cluster Lease slowly (0.8 s): its handover (8
// releases, one after another) outlasts StopTimeout (the members' graceful
// shutdown + 5 s). Start must still return only once it has handed every
// cluster over, without an error: a process that exits at Start's return
// would leave the rest of its clusters to run nowhere for a lease
// duration, its handover still going on.
func TestShardingStopHandsOverOnASlowHost(t *testing.T) {
	h := newShardHarness(t, 8)
	var slow atomic.Bool
	slowWrites := slowClusterLeaseWrites(&slow, 800*time.Millisecond)
	// A long lease: the handover has until its end, on a loaded machine too.
	a := h.launch(replicaSpec{id: "a", wrap: slowWrites, lease: 20 * time.Second, renew: 4 * time.Second, retry: time.Second})
	test.Eventually(t, 60*time.Second, "a runs every cluster", func() bool { return h.owned("a") })
	slow.Store(true)
	if err := a.stop(); err != nil {
		t.Errorf("stopping a replica whose handover outlasts StopTimeout: %v", err)
	}
	var leases coordinationv1.LeaseList
	if err := adminClient(t, "host").List(t.Context(), &leases, crclient.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if l.Labels[shard.RoleLabel] == shard.RoleCluster && ptr.Deref(l.Spec.HolderIdentity, "") == "a" {
			t.Errorf("Start of a returned, and the Lease of %s still names it", l.Annotations[shard.ClusterAnnotation])
		}
	}
}

// TestShardingFleetReadyCheck: two replicas share one cluster. The one
// that does not run it is as ready as it will be, as a cold standby is:
// FleetReadyCheck(1) must pass on both, or a rolling update that waits for
// new replicas to be ready never goes on.
func TestShardingFleetReadyCheck(t *testing.T) {
	h := newShardHarness(t, 1)
	// A replica that has not joined (here: not started) may run none yet:
	// it is not ready, however few clusters it will be given.
	idle, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	}, server.WithSharding(server.ShardingOptions{Identity: "idle", Namespace: h.ns, Group: "shard-test"}))
	if err != nil {
		t.Fatal(err)
	}
	if idle.FleetReadyCheck(1)(nil) == nil {
		t.Error("FleetReadyCheck(1) passes on a sharded replica that has not joined")
	}
	if err := idle.FleetReadyCheck(0)(nil); err != nil {
		t.Errorf("FleetReadyCheck(0) = %v, want it to pass", err)
	}
	replicas := map[string]replica{"a": h.start("a", nil), "b": h.start("b", nil)}
	h.settled(replicas)
	test.Eventually(t, 30*time.Second, "FleetReadyCheck(1) passes on both replicas", func() bool {
		for _, r := range replicas {
			if r.srv.FleetReadyCheck(1)(nil) != nil {
				return false
			}
		}
		return true
	})
	h.noDoubles()
}
