package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// slowMapTime is how long the slow map functions of TestSlowHandlers take
// over an event: an uncached List of a large kind, say.
const slowMapTime = 1500 * time.Millisecond

// maxSlowHandlerDelay is what slow handlers on a member's informer may
// add to another controller's event → Reconcile latency (median).
const maxSlowHandlerDelay = 50 * time.Millisecond

// TestSlowHandlers: map functions that take 1.5 s over every event — a
// host controller's, through FleetKind, and a member controller's on the
// same kind — hold up neither the member's cache nor its other controller
// on that kind: a ConfigMap written in the member reaches that
// controller's Reconcile as fast as without them, while they work through
// their backlog. Nothing of the deliveries is left once the Server stops.
func TestSlowHandlers(t *testing.T) {
	ns := testNamespace(t)
	ignore := goleak.IgnoreCurrent()
	srv := newServer(t, ns)
	var slow atomic.Bool
	var slowCalls atomic.Int32
	slowMap := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		if slow.Load() {
			slowCalls.Add(1)
			time.Sleep(slowMapTime) // the work of a slow map function, not a wait for the test
		}
		return nil
	})
	noop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if err := ctrl.NewControllerManagedBy(srv.GetHostManager()).Named("fleet-slow-" + ns).
		WatchesRawSource(server.FleetKind(srv, &corev1.ConfigMap{}, slowMap)).
		Complete(noop); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	reconciled := map[string]time.Time{} // probe → first Reconcile
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		if err := ctrl.NewControllerManagedBy(mgr).Named("slow-"+ns).
			Watches(&corev1.ConfigMap{}, slowMap).
			Complete(noop); err != nil {
			return err
		}
		return ctrl.NewControllerManagedBy(mgr).Named("fast-" + ns).
			For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				at := time.Now()
				// Read through the member's cache: it has the object too.
				if err := mgr.GetClient().Get(ctx, req.NamespacedName, &corev1.ConfigMap{}); err != nil {
					return reconcile.Result{}, client.IgnoreNotFound(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if _, ok := reconciled[req.Name]; !ok {
					reconciled[req.Name] = at
				}
				return reconcile.Result{}, nil
			}))
	})
	stop := test.Run(t, srv)
	addReady(t, srv, "m1")
	m1 := adminClient(t, "m1")

	// latencies creates n ConfigMaps in m1, one after another, and returns
	// the time from each create to the fast controller's Reconcile.
	latencies := func(prefix string, n int) []time.Duration {
		out := make([]time.Duration, 0, n)
		for i := range n {
			name := fmt.Sprintf("%s-%d", prefix, i)
			start := time.Now()
			if err := m1.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
				t.Fatal(err)
			}
			var at time.Time
			test.Eventually(t, 30*time.Second, name+" reconciled by the fast controller", func() bool {
				mu.Lock()
				defer mu.Unlock()
				var ok bool
				at, ok = reconciled[name]
				return ok
			})
			out = append(out, at.Sub(start))
		}
		return out
	}
	const probes = 9
	before := latencies("quick", probes)
	slow.Store(true)
	with := latencies("probe", probes)
	if slowCalls.Load() == 0 {
		t.Fatal("the slow map functions never ran: the figures below would prove nothing")
	}
	slices.Sort(before)
	slices.Sort(with)
	median := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	delay := median(with) - median(before)
	t.Logf("event → Reconcile of the fast controller: median %v, max %v without slow handlers; median %v, max %v with two 1.5 s map functions on the same informer (delay %v)",
		median(before), before[len(before)-1], median(with), with[len(with)-1], delay)
	if delay > maxSlowHandlerDelay {
		t.Errorf("slow handlers delayed another controller of the member by %v (median), want at most %v", delay, maxSlowHandlerDelay)
	}
	if worst := with[len(with)-1]; worst >= slowMapTime {
		t.Errorf("an event reached the fast controller %v after its write, as late as a slow handler's call", worst)
	}

	slow.Store(false) // let the backlog go, so that stopping waits for one call at most
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}
