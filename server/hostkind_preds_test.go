package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestHostKindPredicates: predicates given to HostKind filter the host's
// events before its handler, as source.Kind's do — the host object the
// predicate rejects is never reconciled in the member, the one created
// after it is.
func TestHostKindPredicates(t *testing.T) {
	ns := testNamespace(t)
	srv := newServer(t, ns)
	var mu sync.Mutex
	seen := map[string]int{}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("host-preds-" + ns).
			WatchesRawSource(server.HostKind(srv, &corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(
				func(_ context.Context, o client.Object) []reconcile.Request {
					return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
				}), predicate.NewPredicateFuncs(func(o client.Object) bool { return !strings.HasPrefix(o.GetName(), "skip-") }))).
			Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
				mu.Lock()
				defer mu.Unlock()
				seen[req.Name]++
				return reconcile.Result{}, nil
			}))
	})
	stop := test.Run(t, srv)
	addReady(t, srv, "m1")
	createConfigMap(t, "host", ns, "skip-me")
	createConfigMap(t, "host", ns, "take-me")
	test.Eventually(t, 30*time.Second, "the accepted host object reconciled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["take-me"] > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := seen["skip-me"]; n != 0 {
		t.Errorf("a host object the predicate rejects was reconciled %d times", n)
	}
}
