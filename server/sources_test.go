package server_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// eventLog counts what a fleet source delivered, by cluster, object and
// event type, and remembers handler contexts that named no cluster.
type eventLog struct {
	mu     sync.Mutex
	counts map[string]int // "cluster/object/type"
	bad    int
}

func newEventLog() *eventLog { return &eventLog{counts: map[string]int{}} }

func (l *eventLog) record(ctx context.Context, obj client.Object, typ string) {
	cluster, ok := known.ClusterFrom(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok {
		l.bad++
	}
	l.counts[cluster+"/"+obj.GetName()+"/"+typ]++
}

func (l *eventLog) count(cluster, obj, typ string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[cluster+"/"+obj+"/"+typ]
}

// handler returns an event handler that records each event and enqueues
// "<cluster>/<object>" as the request's name.
func (l *eventLog) handler() handler.EventHandler {
	enqueue := func(ctx context.Context, obj client.Object, typ string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		l.record(ctx, obj, typ)
		cluster, _ := known.ClusterFrom(ctx)
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: cluster + "/" + obj.GetName()}})
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, "create", q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.ObjectNew, "update", q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, "delete", q)
		},
	}
}

// hostReconciles records the requests a host controller reconciled.
type hostReconciles struct {
	mu   sync.Mutex
	seen map[string]int
}

func (h *hostReconciles) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[req.Name]++
	return reconcile.Result{}, nil
}

func (h *hostReconciles) has(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[name] > 0
}

// newServer is startServer without the start: for tests that register host
// controllers first.
func newServer(t testing.TB, ns string, opts ...server.Option) *server.Server {
	t.Helper()
	srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
		Logger:                 test.Logger(t),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}, append([]server.Option{func(o *server.Options) {
		o.Backoff.Duration = 100 * time.Millisecond
		o.Backoff.Cap = time.Second
	}}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestFleetKindFollowsTheFleet: a host controller watching ConfigMaps of
// the whole fleet gets the events of every member — present, added later,
// and after a member's restart, each once — with the member named in the
// handler's ctx, while another member cannot be reached at all; nothing of
// it is left once the Server has stopped.
func TestFleetKindFollowsTheFleet(t *testing.T) {
	ns := testNamespace(t)
	ignore := goleak.IgnoreCurrent()
	srv := newServer(t, ns)
	log := newEventLog()
	rec := &hostReconciles{seen: map[string]int{}}
	err := ctrl.NewControllerManagedBy(srv.GetHostManager()).Named("fleet-cms-" + ns).
		WatchesRawSource(server.FleetKind(srv, &corev1.ConfigMap{}, log.handler())).
		Complete(rec)
	if err != nil {
		t.Fatal(err)
	}
	// A member that never becomes Ready, there from the start.
	if err := srv.Add(unreachable(t, "nowhere")); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, "m1", ns, "before-start")
	stop := test.Run(t, srv)
	addReady(t, srv, "m1", "m2")

	test.Eventually(t, 30*time.Second, "existing object of m1 delivered", func() bool {
		return log.count("m1", "before-start", "create") == 1 && rec.has("m1/before-start")
	})
	createConfigMap(t, "m2", ns, "in-m2")
	test.Eventually(t, 30*time.Second, "new object of m2 delivered", func() bool {
		return log.count("m2", "in-m2", "create") == 1 && rec.has("m2/in-m2")
	})

	// A member added later: its existing objects and its new ones.
	createConfigMap(t, "m3", ns, "before-add")
	addReady(t, srv, "m3")
	createConfigMap(t, "m3", ns, "after-add")
	test.Eventually(t, 30*time.Second, "m3's objects delivered", func() bool {
		return log.count("m3", "before-add", "create") == 1 && log.count("m3", "after-add", "create") == 1
	})

	// A restart (an Update) gives the member a new Manager: the source
	// follows it, and an event after it arrives once, not once per
	// Manager the member ever had.
	cfg := rest.CopyConfig(fleet.Cluster("m1").Config)
	cfg.UserAgent = "rotated"
	rotated := config.NewNamedConfig("m1", cfg)
	if err := srv.Update(rotated); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, "m1")
	createConfigMap(t, "m1", ns, "after-restart")
	test.Eventually(t, 30*time.Second, "event after the restart delivered", func() bool {
		return log.count("m1", "after-restart", "create") >= 1
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after-restart"}}
	if err := adminClient(t, "m1").Delete(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "delete delivered", func() bool { return log.count("m1", "after-restart", "delete") >= 1 })
	if n := log.count("m1", "after-restart", "create"); n != 1 {
		t.Errorf("create of one object delivered %d times after a restart", n)
	}
	if n := log.count("m1", "after-restart", "delete"); n != 1 {
		t.Errorf("delete of one object delivered %d times after a restart", n)
	}

	// A member that leaves delivers nothing more.
	if err := srv.Delete("m2"); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, "m2", ns, "after-delete")
	createConfigMap(t, "m3", ns, "marker")
	test.Eventually(t, 30*time.Second, "marker delivered", func() bool { return log.count("m3", "marker", "create") == 1 })
	if n := log.count("m2", "after-delete", "create"); n != 0 {
		t.Errorf("a deleted member's event was delivered %d times", n)
	}
	// Nothing of the source is left running for the members that came
	// and went (its attach work ends once the handler is on the informer
	// and, after a restart, has settled what the earlier Manager told).
	test.Eventually(t, 10*time.Second, "no fleet source goroutine left", func() bool {
		return stacksWith("fleetsource.(*fleetKind)") == 0
	})
	log.mu.Lock()
	if log.bad > 0 {
		t.Errorf("%d handler calls had no cluster in ctx", log.bad)
	}
	log.mu.Unlock()

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}

// stacksWith counts the goroutines with fn in their stack.
func stacksWith(fn string) int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// listeners counts the informer handler goroutines of the process:
// client-go runs two per handler registration.
func listeners() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "cache.(*processorListener).run(")
}

// TestHostKindEnqueuesInEveryMember: a member controller watching a host
// kind reconciles, in each member, the host object that changed, with its
// member named in ctx; a member that leaves leaves no handler on the host's
// informer behind.
func TestHostKindEnqueuesInEveryMember(t *testing.T) {
	ns := testNamespace(t)
	srv := newServer(t, ns)
	var mu sync.Mutex
	seen := map[string]int{} // "cluster/object"
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("host-policies-" + ns).
			WatchesRawSource(server.HostKind(srv, &corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(
				func(_ context.Context, o client.Object) []reconcile.Request {
					return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
				}))).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				cluster, _ := known.ClusterFrom(ctx)
				mu.Lock()
				seen[cluster+"/"+req.Name]++
				mu.Unlock()
				return reconcile.Result{}, nil
			}))
	})
	count := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[key]
	}
	stop := test.Run(t, srv)
	addReady(t, srv, "m1")
	createConfigMap(t, "host", ns, "policy-a")
	test.Eventually(t, 30*time.Second, "m1 reconciles the host object", func() bool { return count("m1/policy-a") > 0 })
	base := listeners()

	addReady(t, srv, "m2")
	test.Eventually(t, 30*time.Second, "m2 reconciles the existing host object", func() bool { return count("m2/policy-a") > 0 })
	createConfigMap(t, "host", ns, "policy-b")
	for _, m := range []string{"m1", "m2"} {
		test.Eventually(t, 30*time.Second, m+" reconciles the new host object", func() bool { return count(m+"/policy-b") > 0 })
	}
	if grown := listeners(); grown <= base {
		t.Fatalf("informer handlers did not grow with a member (%d → %d): the check below would prove nothing", base, grown)
	}
	if err := srv.Delete("m2"); err != nil {
		t.Fatal(err)
	}
	// Everything m2 added — its own informers' handlers and its handler
	// on the host's informer — is gone with it.
	test.Eventually(t, 30*time.Second, fmt.Sprintf("informer handlers back to %d", base), func() bool { return listeners() == base })

	createConfigMap(t, "host", ns, "policy-c")
	test.Eventually(t, 30*time.Second, "m1 still reconciles host objects", func() bool { return count("m1/policy-c") > 0 })
	if n := count("m2/policy-c"); n != 0 {
		t.Errorf("a deleted member reconciled a host object %d times", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestClusterEventsTellTheHost: a host controller hears of members becoming
// Ready, Unreachable, Failed and leaving — those there when it starts too —
// with the member named in ctx and nothing else to poll.
func TestClusterEventsTellTheHost(t *testing.T) {
	ns := testNamespace(t)
	srv := newServer(t, ns)
	// Members notice an API server gone through their watches.
	srv.AddReconcilerSetup(configMapController("cms-" + ns))
	var mu sync.Mutex
	var events []server.ClusterEvent
	var at = map[string]time.Time{} // "cluster/type" → when the handler ran
	has := func(cluster string, typ server.ClusterEventType) bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := at[cluster+"/"+string(typ)]
		return ok
	}
	// Ready before the host controller starts: told when it starts (a
	// controller added to the running host Manager).
	stop := test.Run(t, srv)
	addReady(t, srv, "m1")
	var err error
	reconciled := map[string]bool{}
	err = ctrl.NewControllerManagedBy(srv.GetHostManager()).Named("fleet-events-" + ns).
		WatchesRawSource(server.ClusterEvents(srv, func(ctx context.Context, ev server.ClusterEvent) []reconcile.Request {
			cluster, _ := known.ClusterFrom(ctx)
			mu.Lock()
			defer mu.Unlock()
			if cluster != ev.Cluster {
				t.Errorf("event of %s handled with %q in ctx", ev.Cluster, cluster)
			}
			events = append(events, ev)
			at[ev.Cluster+"/"+string(ev.Type)] = time.Now()
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ev.Cluster + "/" + string(ev.Type)}}}
		})).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			mu.Lock()
			reconciled[req.Name] = true
			mu.Unlock()
			return reconcile.Result{}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "m1 Ready told", func() bool { return has("m1", server.ClusterReady) })

	// A member whose API server goes away: Unreachable, with the reason.
	victims, err := fleet.Add("victim-" + ns)
	if err != nil {
		t.Fatal(err)
	}
	victim := victims[0]
	if err := srv.Add(config.NewNamedConfig("victim", victim.Config)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 60*time.Second, "victim Ready told", func() bool { return has("victim", server.ClusterReady) })
	if err := fleet.Remove(victim.Name); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 60*time.Second, "victim Unreachable told", func() bool { return has("victim", server.ClusterUnreachable) })

	// Credentials the member rejects: Failed.
	bad := rest.CopyConfig(fleet.Cluster("m2").Config)
	bad.BearerToken, bad.CertData, bad.KeyData, bad.CertFile, bad.KeyFile = "not-a-token", nil, nil, "", ""
	if err := srv.Add(config.NewNamedConfig("rejected", bad)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "rejected Failed told", func() bool { return has("rejected", server.ClusterFailed) })

	// Deleted: Left, soon.
	deleted := time.Now()
	if err := srv.Delete("m1"); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 10*time.Second, "m1 Left told", func() bool { return has("m1", server.ClusterLeft) })
	test.Eventually(t, 10*time.Second, "m1 Left reconciled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reconciled["m1/Left"]
	})
	mu.Lock()
	t.Logf("figure: member deleted → host handler told: %s", at["m1/Left"].Sub(deleted).Round(time.Millisecond))
	for _, ev := range events {
		switch ev.Type {
		case server.ClusterUnreachable, server.ClusterFailed:
			if ev.Err == nil {
				t.Errorf("%s %s without a reason", ev.Cluster, ev.Type)
			}
		default:
			if ev.Err != nil {
				t.Errorf("%s %s with an error: %v", ev.Cluster, ev.Type, ev.Err)
			}
		}
	}
	mu.Unlock()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
