package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// BenchmarkFleetKindEventToHostReconcile measures, with 20 members (five
// names on each of the fleet's four member API servers, every name its own
// Manager running a ConfigMap controller) and writes arriving at a steady
// 100 per second, the time from a ConfigMap's create in a member to the
// host controller's Reconcile of the request FleetKind mapped it to. Each
// write reaches the host once per name of its API server.
func BenchmarkFleetKindEventToHostReconcile(b *testing.B) {
	ns := testNamespace(b)
	srv := newServer(b, ns)
	srv.AddReconcilerSetup(configMapController("cms-" + ns))
	var mu sync.Mutex
	reconciled := map[string]time.Time{} // "<cluster>/<object>" → first host Reconcile
	err := ctrl.NewControllerManagedBy(srv.GetHostManager()).Named("fleet-latency-" + ns).
		WatchesRawSource(server.FleetKind(srv, &corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(
			func(ctx context.Context, o client.Object) []reconcile.Request {
				cluster, _ := known.ClusterFrom(ctx)
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: cluster + "/" + o.GetName()}}}
			}))).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			now := time.Now()
			mu.Lock()
			if _, ok := reconciled[req.Name]; !ok {
				reconciled[req.Name] = now
			}
			mu.Unlock()
			return reconcile.Result{}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	test.Run(b, srv)
	names := map[string][]string{} // member API server → its names
	for i := range 20 {
		m := members[i%len(members)]
		name := fmt.Sprintf("%s-%d", m, i/len(members))
		names[m] = append(names[m], name)
		if err := srv.Add(config.NewNamedConfig(name, fleet.Cluster(m).Config)); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range names {
		waitReady(b, srv, n...)
	}
	clients := map[string]client.Client{}
	for _, m := range members {
		clients[m] = adminClient(b, m)
	}

	type write struct {
		member, object string
		at             time.Time
	}
	var writes []write
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tick.C
		m := members[i%len(members)]
		obj := fmt.Sprintf("w-%d", i)
		at := time.Now()
		if err := clients[m].Create(b.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: obj}}); err != nil {
			b.Fatal(err)
		}
		writes = append(writes, write{m, obj, at})
	}
	var lat []time.Duration
	deadline := time.Now().Add(time.Minute)
	for _, w := range writes {
		for _, name := range names[w.member] {
			key := name + "/" + w.object
			for {
				mu.Lock()
				t, ok := reconciled[key]
				mu.Unlock()
				if ok {
					lat = append(lat, t.Sub(w.at))
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%s never reached the host controller", key)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
}
