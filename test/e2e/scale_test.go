package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// getter Gets each ConfigMap it is asked to reconcile and counts, per
// cluster, the distinct objects it has seen.
type getter struct {
	client.Client
	mu        sync.Mutex
	seen      map[string]map[string]bool
	first     map[string]time.Time
	reconcile atomic.Int64
}

func newGetter(c client.Client) *getter {
	return &getter{Client: c, seen: map[string]map[string]bool{}, first: map[string]time.Time{}}
}

func (g *getter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster, _ := known.ClusterFrom(ctx)
	var cm corev1.ConfigMap
	if err := g.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	g.reconcile.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen[cluster] == nil {
		g.seen[cluster] = map[string]bool{}
		g.first[cluster] = time.Now()
	}
	g.seen[cluster][req.Name] = true
	return ctrl.Result{}, nil
}

// complete counts the clusters in which all n objects were reconciled.
func (g *getter) complete(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := 0
	for _, s := range g.seen {
		if len(s) >= n {
			c++
		}
	}
	return c
}

func rssKiB() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// settle lets the heap and goroutines come to rest before a reading.
func settle() {
	for range 3 {
		runtime.GC()
		time.Sleep(200 * time.Millisecond)
	}
	debug.FreeOSMemory()
}

// BenchmarkFleet100 is the fleet-scale run: 100 member names, spread over
// three real API servers holding 100 ConfigMaps each, every name with its
// own Manager and caches, and a ConfigMap controller that Gets each object.
// It reports the time from the first Add until every cluster has reconciled
// all its objects, RSS and goroutines per idle engaged cluster, and the
// median time from Add to a cluster's first Reconcile.
func BenchmarkFleet100(b *testing.B) {
	const clusters, objects = 100, 100
	ns := namespace(b, "scale")
	for _, m := range members {
		configMaps(b, m, ns, objects)
	}
	for i := 0; i < b.N; i++ {
		g := newGetter(nil)
		srv, err := server.NewServer(fleet.Cluster("host").Config, ctrl.Options{
			Logger:                 logr.Discard(),
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Cache:                  cache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", ns)},
		})
		if err != nil {
			b.Fatal(err)
		}
		g.Client = srv.GetClient()
		srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
			return ctrl.NewControllerManagedBy(mgr).Named("scale").For(&corev1.ConfigMap{}).Complete(g)
		})
		stop := test.Run(b, srv)

		settle()
		rss0, gr0 := rssKiB(), runtime.NumGoroutine()
		added := map[string]time.Time{}
		begin := time.Now()
		for c := range clusters {
			name := fmt.Sprintf("member-%03d", c)
			added[name] = time.Now()
			if err := srv.Add(config.NewNamedConfig(name, fleet.Cluster(members[c%len(members)]).Config)); err != nil {
				b.Fatal(err)
			}
		}
		test.Eventually(b, 2*time.Minute, "every cluster reconciled every object", func() bool { return g.complete(objects) == clusters })
		all := time.Since(begin)
		failures := 0
		for _, st := range srv.Statuses() {
			if st.Failures > 0 {
				failures += st.Failures
				b.Logf("%s failed %d times: %v", st.Name, st.Failures, st.LastError)
			}
		}

		g.mu.Lock()
		firsts := make([]time.Duration, 0, len(g.first))
		for name, at := range g.first {
			firsts = append(firsts, at.Sub(added[name]))
		}
		g.mu.Unlock()
		slices.Sort(firsts)

		settle()
		rss1, gr1 := rssKiB(), runtime.NumGoroutine()
		b.ReportMetric(all.Seconds(), "s-all-reconciled")
		b.ReportMetric(float64(rss1-rss0)/clusters, "KiB-rss/cluster")
		b.ReportMetric(float64(gr1-gr0)/clusters, "goroutines/cluster")
		b.ReportMetric(float64(firsts[len(firsts)/2].Microseconds())/1000, "ms-p50-add-to-first-reconcile")

		if err := stop(); err != nil {
			b.Fatal(err)
		}
	}
}
