package server

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// gatherSeries gathers the members' series and returns those of clusters
// whose name starts with prefix, each as
// "family{label=value,…} value" (a histogram's value is its count and
// cumulative buckets), sorted.
func gatherSeries(t *testing.T, prefix string) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(&memberSeriesSet); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			keep := false
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
				keep = keep || l.GetName() == clusterLabelName && strings.HasPrefix(l.GetValue(), prefix)
			}
			if keep {
				out = append(out, fmt.Sprintf("%s{%s} %s", f.GetName(), strings.Join(labels, ","), value(m)))
			}
		}
	}
	slices.Sort(out)
	return out
}

func value(m *dto.Metric) string {
	switch {
	case m.GetCounter() != nil:
		return fmt.Sprint(m.GetCounter().GetValue())
	case m.GetGauge() != nil:
		return fmt.Sprint(m.GetGauge().GetValue())
	}
	h := m.GetHistogram()
	s := fmt.Sprintf("count=%d", h.GetSampleCount())
	for _, b := range h.GetBucket() {
		s += fmt.Sprintf(" le%g=%d", b.GetUpperBound(), b.GetCumulativeCount())
	}
	return s
}

// TestClusterSeriesForgetIsExact: forget drops every series of its
// cluster and none of another's, however their names and label values
// look: names that are prefixes of each other, controller names with
// quotes, separators, newlines and bytes that are not UTF-8 (exported
// with the replacement character; the scrape does not fail).
func TestClusterSeriesForgetIsExact(t *testing.T) {
	names := []string{"prefix", "prefix-1", "prefix-10", "prefix.1"}
	controllers := []string{`widgets`, `a"b`, "cluster=prefix,x", "line\nbreak", "ünï ☸", "bad\xffbyte"}
	for _, name := range names {
		s := clusterSeries{name: name}
		s.init()
		s.phase(PhaseReady)
		s.timeToReady(time.Second)
		s.probed(true, time.Millisecond)
		s.failure(true)
		s.restart()
		for _, c := range controllers {
			s.reconciled(c, "success", time.Millisecond)
			s.reconciled(c, "error", time.Millisecond)
		}
	}
	t.Cleanup(func() {
		for _, name := range names {
			memberSeriesSet.release(name)
		}
	})
	all := gatherSeries(t, "prefix")
	// Per cluster: ready, time to ready, failures, setup errors,
	// restarts, reachable, probe histogram, phase, and per controller two
	// results, errors and the time histogram.
	if per := 8 + 4*len(controllers); len(all) != per*len(names) {
		t.Fatalf("%d series, want %d:\n%s", len(all), per*len(names), strings.Join(all, "\n"))
	}
	if !slices.ContainsFunc(all, func(s string) bool { return strings.Contains(s, "controller=bad\uFFFDbyte") }) {
		t.Errorf("no series of the controller whose name is not UTF-8:\n%s", strings.Join(all, "\n"))
	}
	seriesOf := func(series []string, name string) []string {
		return slices.DeleteFunc(slices.Clone(series), func(s string) bool {
			return !strings.Contains(s, "{cluster="+name+",") && !strings.Contains(s, "{cluster="+name+"}")
		})
	}
	memberSeriesSet.release("prefix")
	left := gatherSeries(t, "prefix")
	if got := seriesOf(left, "prefix"); len(got) != 0 {
		t.Errorf("forgotten cluster still has series:\n%s", strings.Join(got, "\n"))
	}
	for _, other := range names[1:] {
		if got, want := seriesOf(left, other), seriesOf(all, other); !slices.Equal(got, want) {
			t.Errorf("%s's series changed when another was forgotten:\n%s\nwant\n%s", other, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestClusterSeriesValues: what each report makes of the series, and which
// series exist when, as the vectors they replaced had them.
func TestClusterSeriesValues(t *testing.T) {
	s := clusterSeries{name: "values"}
	t.Cleanup(s.forget)
	s.init()
	want := []string{
		"mccr_cluster_failures_total{cluster=values} 0",
		"mccr_cluster_reachable{cluster=values} 0",
		"mccr_cluster_ready{cluster=values} 0",
		"mccr_cluster_restarts_total{cluster=values} 0",
		"mccr_cluster_setup_errors_total{cluster=values} 0",
	}
	if got := gatherSeries(t, "values"); !slices.Equal(got, want) {
		t.Errorf("after init:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	s.phase(PhaseSyncing)
	s.phase(PhaseReady)
	s.timeToReady(1500 * time.Millisecond)
	s.failure(false)
	s.failure(true)
	s.restart()
	s.probed(false, 5*time.Second)
	s.probed(true, 3*time.Millisecond)
	s.reconciled("c", "success", 2*time.Millisecond)
	s.reconciled("c", "requeue", 30*time.Millisecond)
	s.reconciled("c", "success", 90*time.Second)
	want = []string{
		"mccr_cluster_failures_total{cluster=values} 2",
		"mccr_cluster_phase{cluster=values,phase=Ready} 1",
		"mccr_cluster_probe_seconds{cluster=values} count=2 le0.005=1 le0.025=1 le0.1=1 le0.5=1 le1=1 le2.5=1 le5=2 le10=2",
		"mccr_cluster_reachable{cluster=values} 1",
		"mccr_cluster_ready{cluster=values} 1",
		"mccr_cluster_restarts_total{cluster=values} 1",
		"mccr_cluster_setup_errors_total{cluster=values} 1",
		"mccr_cluster_time_to_ready_seconds{cluster=values} 1.5",
		"mccr_reconcile_time_seconds{cluster=values,controller=c} count=3 le0.005=1 le0.025=1 le0.1=2 le0.25=2 le1=2 le2.5=2 le10=2 le60=2",
		"mccr_reconcile_total{cluster=values,controller=c,result=requeue} 1",
		"mccr_reconcile_total{cluster=values,controller=c,result=success} 2",
	}
	if got := gatherSeries(t, "values"); !slices.Equal(got, want) {
		t.Errorf("after reports:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	s.reconciled("c", "error", time.Millisecond)
	s.phase(PhaseFailed)
	got := gatherSeries(t, "values")
	for _, w := range []string{
		"mccr_reconcile_errors_total{cluster=values,controller=c} 1",
		"mccr_cluster_phase{cluster=values,phase=Failed} 1",
		"mccr_cluster_ready{cluster=values} 0",
	} {
		if !slices.Contains(got, w) {
			t.Errorf("no %s in\n%s", w, strings.Join(got, "\n"))
		}
	}
	if slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "phase=Ready") }) {
		t.Errorf("the phase left still has its series:\n%s", strings.Join(got, "\n"))
	}
}

// TestClusterSeriesConcurrent reports, gathers and forgets at once (run
// with -race).
func TestClusterSeriesConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			s := clusterSeries{name: fmt.Sprint("concurrent-", i)}
			s.init()
			for j := range 200 {
				s.reconciled(fmt.Sprint("c", j%3), "success", time.Millisecond)
				s.probed(true, time.Millisecond)
				s.phase(phaseOrder[j%len(phaseOrder)])
			}
			s.forget()
		})
	}
	for range 20 {
		gatherSeries(t, "concurrent-")
	}
	wg.Wait()
	if left := gatherSeries(t, "concurrent-"); len(left) != 0 {
		t.Errorf("series left after forget:\n%s", strings.Join(left, "\n"))
	}
}

// BenchmarkClusterSeriesForget is Delete's share of the metrics with
// 10,000 members' series around: constant, where scanning every series for
// the cluster's grew with the fleet.
func BenchmarkClusterSeriesForget(b *testing.B) {
	const n = 10000
	for i := range n {
		s := clusterSeries{name: fmt.Sprintf("bench-%05d", i)}
		s.init()
		s.reconciled("c", "success", time.Millisecond)
	}
	b.Cleanup(func() {
		for i := range n {
			memberSeriesSet.release(fmt.Sprintf("bench-%05d", i))
		}
	})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := clusterSeries{name: fmt.Sprintf("bench-extra-%d", i)}
		s.init()
		s.reconciled("c", "success", time.Millisecond)
		s.forget()
		i++
	}
}

// BenchmarkClusterSeriesReconciled is what every Reconcile of a member
// pays for its series.
func BenchmarkClusterSeriesReconciled(b *testing.B) {
	s := clusterSeries{name: "bench-reconciled"}
	s.init()
	b.Cleanup(s.forget)
	b.ReportAllocs()
	for b.Loop() {
		s.reconciled("c", "success", time.Millisecond)
	}
}

// BenchmarkMemberSeries is the series of 10,000 members, each Ready,
// probed and with one controller's reconciles: the heap they hold per
// member, and a scrape of them (the registry's Gather).
func BenchmarkMemberSeries(b *testing.B) {
	const n = 10000
	registerMetrics()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		s := clusterSeries{name: fmt.Sprintf("gather-%05d", i)}
		s.init()
		s.phase(PhaseReady)
		s.timeToReady(time.Second)
		s.probed(true, time.Millisecond)
		s.reconciled("c", "success", time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.Cleanup(func() {
		for i := range n {
			memberSeriesSet.release(fmt.Sprintf("gather-%05d", i))
		}
	})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := metrics.Registry.Gather(); err != nil {
			b.Fatal(err)
		}
	}
	// After the loop, whose start clears what was reported before it.
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1024/n, "KiB-heap/member")
}

// TestSeriesHoldRacesRelease: a Server taking a member name's series
// while another lets them go finds them held and counted, whichever comes
// first.
func TestSeriesHoldRacesRelease(t *testing.T) {
	lost := 0
	for range 20000 {
		var s seriesSet
		s.hold("x")
		done := make(chan struct{})
		go func() {
			s.release("x")
			close(done)
		}()
		s.hold("x")
		<-done
		if m := s.lookup("x"); m == nil || m.holders != 1 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of 20000 times a name held once more than let go had no series, or a wrong count", lost)
	}
}
