package e2e

import (
	"fmt"
	"sync"
	"testing"
)

// BenchmarkFleet is the fleet-scale run, by number of clusters, by how they
// reach the three member API servers (each behind an endpoint of its own,
// as N real clusters are, or as names straight on the API servers), by the
// kinds the controller watches and by engine: an mccr Server, or a plain
// controller-runtime Manager per cluster, the floor mccr starts from. Every
// cluster runs a ConfigMap controller that Gets each object of a namespace
// holding 100 ConfigMaps (10 at 1,000 clusters); at kinds=10 it also Owns
// nine more kinds, of which the namespace holds one object each
// (kinds_test.go), as an operator watches what it makes.
//
// It reports the time from registering the first cluster until every
// cluster has reconciled every object; RSS, Go heap in use, goroutine
// stacks in use and goroutines per idle engaged cluster (after garbage
// collection); the time from registering one more cluster to its first
// Reconcile with the whole fleet running (p50 and p99 over 100 clusters
// registered one after the other); and how much RSS those 100 more
// clusters added. What one more watched kind costs a cluster is the
// difference between the kinds=10 and kinds=1 rows over nine
// (hack/benchdoc's "Per kind" table, from the medians of the runs).
func BenchmarkFleet(b *testing.B) {
	runs := []struct {
		clusters, objects int
		endpoints         string
		kinds             int
		engines           []string
	}{
		{100, 100, "distinct", 1, []string{engineMCCR, enginePlain}},
		{100, 100, "distinct", 10, []string{engineMCCR, enginePlain}},
		{100, 100, "shared", 1, []string{engineMCCR}},
		{1000, 10, "distinct", 1, []string{engineMCCR, enginePlain}},
	}
	for _, r := range runs {
		for _, eng := range r.engines {
			b.Run(fmt.Sprintf("clusters=%d/endpoints=%s/kinds=%d/%s", r.clusters, r.endpoints, r.kinds, eng), func(b *testing.B) {
				s := scale{Engine: eng, Clusters: r.clusters, Objects: r.objects, More: 100, Distinct: r.endpoints == "distinct", Kinds: r.kinds}
				ns := scaleNamespace(b, r.objects, r.kinds)
				for i := 0; i < b.N; i++ {
					fig := runScale(b, s, ns, scaleKubeconfigs(b, s))
					b.ReportMetric(fig.AllReconciled.Seconds(), "s-all-reconciled")
					b.ReportMetric(fig.RSSKiB, "KiB-rss/cluster")
					b.ReportMetric(fig.HeapKiB, "KiB-heap/cluster")
					b.ReportMetric(fig.StackKiB, "KiB-stack/cluster")
					b.ReportMetric(fig.Goroutines, "goroutines/cluster")
					b.ReportMetric(ms(fig.FirstP50), "ms-p50-first-reconcile")
					b.ReportMetric(ms(fig.FirstP99), "ms-p99-first-reconcile")
					b.ReportMetric(fig.MoreMiB, "MiB-rss/100-more-clusters")
					checkFailures(b, fig.Failures, fig.FailureNotes)
				}
			})
		}
	}
}

var scaleNamespaces sync.Map // namespace name → made

// scaleNamespace returns a namespace holding n ConfigMaps in every member
// API server and, for a controller watching more than one kind, one object
// of each kind it Owns; made once per process.
func scaleNamespace(tb testing.TB, n, kinds int) string {
	tb.Helper()
	ns := fmt.Sprintf("scale-%d", n)
	if kinds > 1 {
		ns = fmt.Sprintf("scale-%d-kinds-%d", n, kinds)
	}
	if _, done := scaleNamespaces.Load(ns); done {
		return ns
	}
	namespace(tb, ns)
	for _, m := range members {
		configMaps(tb, m, ns, n)
		if kinds > 1 {
			ownedObjects(tb, m, ns)
		}
	}
	scaleNamespaces.Store(ns, true)
	return ns
}
