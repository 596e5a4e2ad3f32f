package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/known"
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

// TestHostObjectHonoursTheBuilder: a member controller watching a host
// kind through the builder's Watches(HostObject(...)) gets the host's
// events after the builder's WithEventFilter and the watch's own
// WithPredicates, as every other watch of the controller, with its member
// named in the handler's ctx; a member that leaves leaves no handler on
// the host's informer behind, and nothing of the Server is left once it
// has stopped.
func TestHostObjectHonoursTheBuilder(t *testing.T) {
	ns := testNamespace(t)
	ignore := goleak.IgnoreCurrent()
	srv := newServer(t, ns)
	notPrefixed := func(prefix string) predicate.Predicate {
		return predicate.NewPredicateFuncs(func(o client.Object) bool { return !strings.HasPrefix(o.GetName(), prefix) })
	}
	var mu sync.Mutex
	seen := map[string]int{} // "cluster/request name"
	var unnamed []string     // handler calls whose ctx named no member
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("host-object-"+ns).
			For(&corev1.ConfigMap{}).
			WithEventFilter(notPrefixed("skip-")).
			Watches(server.HostObject(srv, &corev1.ConfigMap{}), handler.EnqueueRequestsFromMapFunc(
				func(ctx context.Context, o client.Object) []reconcile.Request {
					if c, ok := known.ClusterFrom(ctx); !ok || (c != "m1" && c != "m2") {
						mu.Lock()
						unnamed = append(unnamed, o.GetName())
						mu.Unlock()
					}
					return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ns, Name: "host." + o.GetName()}}}
				}), builder.WithPredicates(notPrefixed("drop-"))).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				cluster, _ := known.ClusterFrom(ctx)
				mu.Lock()
				defer mu.Unlock()
				seen[cluster+"/"+req.Name]++
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
	// Each rejected object is created before an accepted one: a single
	// worker reconciles in order, so once the accepted one is reconciled
	// a rejected one that got through would have been too.
	createConfigMap(t, "host", ns, "skip-host")
	createConfigMap(t, "host", ns, "drop-host")
	createConfigMap(t, "m1", ns, "skip-member")
	createConfigMap(t, "host", ns, "take-a")
	createConfigMap(t, "m1", ns, "take-member")
	test.Eventually(t, 30*time.Second, "m1 reconciles the accepted host and member objects", func() bool {
		return count("m1/host.take-a") > 0 && count("m1/take-member") > 0
	})
	base := listeners()

	addReady(t, srv, "m2")
	test.Eventually(t, 30*time.Second, "m2 reconciles the existing host object", func() bool { return count("m2/host.take-a") > 0 })
	if grown := listeners(); grown <= base {
		t.Fatalf("informer handlers did not grow with a member (%d → %d): the check below would prove nothing", base, grown)
	}
	if err := srv.Delete("m2"); err != nil {
		t.Fatal(err)
	}
	// m2's handler on the host's informer went with it: controller-runtime's
	// Kind source never removes one, the member's cache does.
	test.Eventually(t, 30*time.Second, fmt.Sprintf("informer handlers back to %d", base), func() bool { return listeners() == base })
	createConfigMap(t, "host", ns, "take-b")
	test.Eventually(t, 30*time.Second, "m1 still reconciles host objects", func() bool { return count("m1/host.take-b") > 0 })

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, key := range []string{"m1/host.skip-host", "m2/host.skip-host", "m1/host.drop-host", "m2/host.drop-host", "m1/skip-member", "m2/host.take-b"} {
		if n := seen[key]; n != 0 {
			t.Errorf("%s reconciled %d times, want 0", key, n)
		}
	}
	if len(unnamed) > 0 {
		t.Errorf("handler ctx named no member for %v", unnamed)
	}
	mu.Unlock()
	fleet.CloseConnections()
	leakcheck.VerifyNone(t, ignore)
}
