package server_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// BenchmarkAddToFirstReconcile measures Server.Add of a cluster until its
// first Reconcile, with 1 and with 10 clusters already running. Each member
// name has its own Manager; names share the fleet's real API servers.
func BenchmarkAddToFirstReconcile(b *testing.B) {
	for _, running := range []int{1, 10} {
		b.Run(fmt.Sprintf("running=%d", running), func(b *testing.B) {
			ns := testNamespace(b)
			for _, m := range members[:3] {
				createConfigMap(b, m, ns, "one")
			}
			f := &test.FirstReconcile{}
			srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
				Metrics:                metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress: "0",
				Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
			})
			if err != nil {
				b.Fatal(err)
			}
			srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
				return ctrl.NewControllerManagedBy(mgr).Named("first-" + ns).For(&corev1.ConfigMap{}).Complete(f)
			})
			test.Run(b, srv)
			for i := range running {
				name := fmt.Sprintf("running-%d", i)
				if err := srv.Add(config.NewNamedConfig(name, fleet.Cluster(members[i%3]).Config)); err != nil {
					b.Fatal(err)
				}
				<-f.Seen(name)
			}
			var took []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("added-%d", i)
				begin := time.Now()
				if err := srv.Add(config.NewNamedConfig(name, fleet.Cluster("m1").Config)); err != nil {
					b.Fatal(err)
				}
				select {
				case <-f.Seen(name):
				case <-time.After(time.Minute):
					b.Fatalf("no reconcile in %s within a minute", name)
				}
				took = append(took, time.Since(begin))
				b.StopTimer()
				if err := srv.Delete(name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
		})
	}
}
