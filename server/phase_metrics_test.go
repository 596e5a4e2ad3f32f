package server_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/test"
)

// phaseSeries returns the phases mccr_cluster_phase has a series of for a
// cluster, with their values.
func phaseSeries(t *testing.T, cluster string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range family(t, "mccr_cluster_phase") {
		if label(m, "cluster") == cluster {
			out[label(m, "phase")] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestPhaseAndWatchErrorMetrics: mccr_cluster_phase has one series per
// member, its current phase at 1, and none once it is deleted, so that
// sum by (phase) counts the fleet per phase; mccr_watch_errors_total counts
// a watcher's errors under its type.
func TestPhaseAndWatchErrorMetrics(t *testing.T) {
	ns := testNamespace(t)
	r := startServer(t, ns, nil)
	only := func(cluster, phase string) func() bool {
		return func() bool {
			got := phaseSeries(t, cluster)
			return len(got) == 1 && got[phase] == 1
		}
	}
	addReady(t, r.srv, "m1")
	test.Eventually(t, 10*time.Second, "m1's only phase series is Ready", only("m1", "Ready"))
	if err := r.srv.Add(unreachable(t, "gone-"+ns)); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 30*time.Second, "the unreachable member's only phase series is Failed", only("gone-"+ns, "Failed"))
	for _, name := range []string{"m1", "gone-" + ns} {
		if err := r.srv.Delete(name); err != nil {
			t.Fatal(err)
		}
		if got := phaseSeries(t, name); len(got) != 0 {
			t.Errorf("%s deleted, phase series left: %v", name, got)
		}
	}

	const series = "server_test.chanWatcher"
	before := max(metricValue(t, "mccr_watch_errors_total", "watcher", series), 0)
	w := newChanWatcher()
	r.srv.Watch(w)
	w.errs <- errors.New("a broken object")
	w.errs <- errors.New("another broken object")
	test.Eventually(t, 10*time.Second, "two watcher errors counted", func() bool {
		return metricValue(t, "mccr_watch_errors_total", "watcher", series) == before+2
	})
	if got := len(r.srv.WatchErrors()); got < 2 {
		t.Errorf("WatchErrors kept %d errors, want the 2 counted", got)
	}
}
