package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// fakeServer starts a Server whose host is a fake API server, with the
// given setups, for the rest of the test. stop stops the Server, then the
// host's fake API server.
func fakeServer(t *testing.T, mutate func(*ctrl.Options), setups ...func(ctrl.Manager) error) (*server.Server, func() error) {
	t.Helper()
	return fakeServerWith(t, mutate, nil, setups...)
}

// fakeServerWith is fakeServer with the Server's own options changed by
// with too.
func fakeServerWith(t *testing.T, mutate func(*ctrl.Options), with func(*server.Options), setups ...func(ctrl.Manager) error) (*server.Server, func() error) {
	t.Helper()
	srv, host := newFakeServer(t, mutate, with, setups...)
	stopServer := test.Run(t, srv)
	return srv, func() error {
		err := stopServer()
		host.Close()
		return err
	}
}

// newFakeServer is fakeServerWith's Server, not started, and its host.
func newFakeServer(t *testing.T, mutate func(*ctrl.Options), with func(*server.Options), setups ...func(ctrl.Manager) error) (*server.Server, *fakeapi.Server) {
	t.Helper()
	host := fakeapi.New()
	host.Start()
	t.Cleanup(host.Close)
	o := ctrl.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{"default": {}}},
	}
	if mutate != nil {
		mutate(&o)
	}
	srv, err := server.NewServer(host.Config(), o, func(o *server.Options) {
		o.Backoff.Duration = 20 * time.Millisecond
		o.Backoff.Cap = 200 * time.Millisecond
		if with != nil {
			with(o)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range setups {
		srv.AddReconcilerSetup(s)
	}
	return srv, host
}

func fakeMember(t *testing.T, seed ...string) *fakeapi.Server {
	t.Helper()
	f := fakeapi.New()
	for _, name := range seed {
		f.Seed(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

func configMapController(name string) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named(name).For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				return reconcile.Result{}, nil
			}))
	}
}

func waitPhase(t testing.TB, srv *server.Server, name string, p server.Phase) {
	t.Helper()
	test.Eventually(t, 30*time.Second, name+" "+string(p), func() bool {
		st, err := srv.Status(name)
		return err == nil && st.Phase == p
	})
}

// TestCallsToLeavingClusterReturn: a Get, a List and a write aimed at a
// cluster, each waiting on it (an informer that cannot sync, an API server
// that does not answer) with a ctx that has no deadline — as a Reconcile's
// has not — return as soon as the cluster is deleted (ErrClusterNotFound)
// or restarted by an Update (ErrClusterNotReady). The write was sent, so it
// may have been applied: it gets the write grace for its answer, and then
// says the outcome is unknown (ErrOutcomeUnknown), never NotFound/NotReady.
func TestCallsToLeavingClusterReturn(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	c := srv.GetClient()
	for _, leave := range []string{"Delete", "Update"} {
		t.Run(leave, func(t *testing.T) {
			f := fakeMember(t, "x")
			name := "leaving-" + strings.ToLower(leave)
			nc := config.NewNamedConfig(name, f.Config())
			if err := srv.Add(nc); err != nil {
				t.Fatal(err)
			}
			waitPhase(t, srv, name, server.PhaseReady)
			ctx := known.WithCluster(context.Background(), name)
			// The API server stops answering: a Secret's informer (a
			// new kind) never syncs, and a write never gets an answer.
			f.Hang(true)
			defer f.Hang(false)
			calls := map[string]func() error{
				"Get":  func() error { return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "s"}, &corev1.Secret{}) },
				"List": func() error { return c.List(ctx, &corev1.SecretList{}, client.InNamespace("default")) },
				"Create": func() error {
					return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "new"}})
				},
			}
			results := map[string]chan error{}
			for what, call := range calls {
				ch := make(chan error, 1)
				results[what] = ch
				go func() { ch <- call() }()
			}
			for what, ch := range results {
				select {
				case err := <-ch:
					t.Fatalf("%s returned before the cluster left: %v", what, err)
				case <-time.After(300 * time.Millisecond):
				}
			}
			want := server.ErrClusterNotFound
			if leave == "Delete" {
				if err := srv.Delete(name); err != nil {
					t.Fatal(err)
				}
			} else {
				changed := f.Config()
				changed.UserAgent = "changed"
				if err := srv.Update(config.NewNamedConfig(name, changed)); err != nil {
					t.Fatal(err)
				}
				want = server.ErrClusterNotReady
			}
			for what, ch := range results {
				want, within := want, 5*time.Second
				if what == "Create" {
					want, within = server.ErrOutcomeUnknown, mcclient.DefaultWriteGrace+5*time.Second
				}
				select {
				case err := <-ch:
					if !errors.Is(err, want) {
						t.Errorf("%s: %v, want %v", what, err, want)
					}
					if what == "Create" && (errors.Is(err, server.ErrClusterNotFound) || errors.Is(err, server.ErrClusterNotReady)) {
						t.Errorf("Create was sent, yet it says nothing was: %v", err)
					}
				case <-time.After(within):
					t.Fatalf("%s still waits %s after the cluster left", what, within)
				}
			}
		})
	}
}

// TestDeleteLeavesNothingBehind: after Delete no metric series of the
// cluster remains (also for one that was Ready, whose stop used to write
// its gauge back), and adding and deleting 5,000 distinct names leaves no
// bookkeeping: no name, no series, a flat heap.
func TestDeleteLeavesNothingBehind(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	f := fakeMember(t, "x")
	if err := srv.Add(config.NewNamedConfig("was-ready", f.Config())); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, srv, "was-ready", server.PhaseReady)
	if n := seriesOf(t, "was-ready"); n == 0 {
		t.Fatal("a Ready cluster has no metric series: the check below would prove nothing")
	}
	if err := srv.Delete("was-ready"); err != nil {
		t.Fatal(err)
	}
	if n := seriesOf(t, "was-ready"); n != 0 {
		t.Errorf("%d metric series of a deleted cluster remain", n)
	}

	cycle := func(from, to int) {
		for i := from; i < to; i++ {
			name := fmt.Sprintf("brief-%05d", i)
			if err := srv.Add(config.NewNamedConfig(name, f.Config())); err != nil {
				t.Fatal(err)
			}
			if err := srv.Delete(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	cycle(0, 500) // warm up pools and caches
	before := heapInUse()
	cycle(500, 5500)
	after := heapInUse()
	t.Logf("figure: 5,000 Add+Delete of distinct names: heap in use %s before, %s after", mib(before), mib(after))
	if after > before+4<<20 {
		t.Errorf("heap grew from %s to %s over 5,000 names", mib(before), mib(after))
	}
	if names := srv.ClusterNames(); len(names) != 0 {
		t.Errorf("names left: %d", len(names))
	}
	if st := srv.Statuses(); len(st) != 0 {
		t.Errorf("statuses left: %d", len(st))
	}
	if n := seriesOf(t, "brief-"); n != 0 {
		t.Errorf("%d metric series of deleted clusters remain", n)
	}
}

// seriesOf counts the mccr_cluster_ series whose cluster label starts with
// prefix.
func seriesOf(t *testing.T, prefix string) int {
	t.Helper()
	return countSeries(t, "mccr_cluster_", func(cluster string) bool { return cluster != "" && strings.HasPrefix(cluster, prefix) })
}

// countSeries counts the series of the families named family… whose
// cluster label matches.
func countSeries(t *testing.T, family string, match func(cluster string) bool) int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range families {
		if !strings.HasPrefix(mf.GetName(), family) {
			continue
		}
		for _, m := range mf.GetMetric() {
			if match(clusterLabel(m)) {
				n++
			}
		}
	}
	return n
}

func clusterLabel(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "cluster" {
			return l.GetValue()
		}
	}
	return ""
}

// chanWatcher is a ConfigWatcher fed by the test.
type chanWatcher struct {
	events chan configwatcher.Event
	errs   chan error
	once   chan struct{}
}

func newChanWatcher() *chanWatcher {
	return &chanWatcher{events: make(chan configwatcher.Event), errs: make(chan error), once: make(chan struct{})}
}

func (w *chanWatcher) Events() <-chan configwatcher.Event { return w.events }
func (w *chanWatcher) Errors() <-chan error               { return w.errs }
func (w *chanWatcher) Stop() {
	select {
	case <-w.once:
	default:
		close(w.once)
		close(w.events)
		close(w.errs)
	}
}

// TestWatchedEventsDoNotWaitForAnotherClustersStop: a cluster whose
// Manager takes long to drain does not hold back the next event, for
// another cluster, of the same watcher.
func TestWatchedEventsDoNotWaitForAnotherClustersStop(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	// The slow cluster's runnable ignores its ctx until released.
	slowDrain := func(mgr ctrl.Manager) error {
		return mgr.Add(managerRunnable(func(ctx context.Context) error {
			if name, _ := known.ClusterFrom(ctx); name != "slow" {
				<-ctx.Done()
				return nil
			}
			<-ctx.Done()
			<-release
			return nil
		}))
	}
	long := time.Minute
	srv, _ := fakeServer(t, func(o *ctrl.Options) { o.GracefulShutdownTimeout = &long }, slowDrain)
	f := fakeMember(t)
	w := newChanWatcher()
	srv.Watch(w)
	w.events <- configwatcher.Event{Type: configwatcher.Added, Config: config.NewNamedConfig("slow", f.Config())}
	waitPhase(t, srv, "slow", server.PhaseReady)
	w.events <- configwatcher.Event{Type: configwatcher.Deleted, Config: &config.NamedConfig{Name: "slow"}}
	sent := make(chan struct{})
	go func() {
		w.events <- configwatcher.Event{Type: configwatcher.Added, Config: config.NewNamedConfig("fast", f.Config())}
		close(sent)
	}()
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher's next event waited for another cluster's stop")
	}
	waitPhase(t, srv, "fast", server.PhaseReady)
	if _, err := srv.Status("slow"); !errors.Is(err, server.ErrClusterNotFound) {
		t.Errorf("deleted cluster still known: %v", err)
	}
}

type managerRunnable func(context.Context) error

func (f managerRunnable) Start(ctx context.Context) error { return f(ctx) }

// TestFleetListWaitsForSyncingMembers: a fleet-wide List made while
// members are still Syncing (one of their controllers has a source that has
// not synced yet) waits for their caches, as a cached client does, instead
// of failing with ErrClusterNotReady.
func TestFleetListWaitsForSyncingMembers(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	gated := func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("gated").WatchesRawSource(gatedSource{release}).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				return reconcile.Result{}, nil
			}))
	}
	srv, _ := fakeServer(t, nil, configMapController("cms"), gated)
	for _, name := range []string{"s1", "s2"} {
		f := fakeMember(t, "cm-"+name)
		if err := srv.Add(config.NewNamedConfig(name, f.Config())); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, srv, name, server.PhaseSyncing)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cms corev1.ConfigMapList
	if err := srv.GetClient().List(ctx, &cms, client.InNamespace("default")); err != nil {
		t.Fatalf("fleet-wide List while members sync: %v", err)
	}
	got := map[string]bool{}
	for _, cm := range cms.Items {
		got[cm.Annotations[known.ClusterAnnotation]+"/"+cm.Name] = true
	}
	if !got["s1/cm-s1"] || !got["s2/cm-s2"] {
		t.Errorf("items: %v", got)
	}
	for _, name := range []string{"s1", "s2"} {
		if st, _ := srv.Status(name); st.Phase != server.PhaseSyncing {
			t.Errorf("%s is %s: the List was not made while it synced", name, st.Phase)
		}
	}
}

// gatedSource is a source that has synced only once release is closed: it
// keeps a member Syncing for as long as a test needs.
type gatedSource struct{ release chan struct{} }

func (gatedSource) Start(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return nil
}

func (s gatedSource) WaitForSync(ctx context.Context) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestReadsAfterReAddReturnOurErrorsOnly: a Get aimed at a cluster that was
// just added again returns its data or one of our sentinels, never
// controller-runtime's ErrCacheNotStarted.
func TestReadsAfterReAddReturnOurErrorsOnly(t *testing.T) {
	srv, _ := fakeServer(t, nil, configMapController("cms"))
	f := fakeMember(t, "x")
	ctx, cancel := context.WithTimeout(known.WithCluster(context.Background(), "again"), time.Minute)
	defer cancel()
	for i := range 30 {
		if err := srv.Add(config.NewNamedConfig("again", f.Config())); err != nil {
			t.Fatal(err)
		}
		for {
			var cm corev1.ConfigMap
			err := srv.GetClient().Get(ctx, client.ObjectKey{Namespace: "default", Name: "x"}, &cm)
			if err == nil {
				break
			}
			if !errors.Is(err, server.ErrClusterNotReady) {
				t.Fatalf("round %d: %v", i, err)
			}
			time.Sleep(time.Millisecond)
		}
		if err := srv.Delete("again"); err != nil {
			t.Fatal(err)
		}
	}
}
