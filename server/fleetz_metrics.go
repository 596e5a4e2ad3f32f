package server

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mccr-dev/mccr/internal/fleetz"
)

// The fleet page reads the Server's own reconcile series (metrics.go) for
// per-member figures: they are the only ones with a cluster label.
// controller-runtime's workqueue depth is read from its registry and shown
// per controller over all members, since every member's queue of a
// controller adds to the one series of that controller's name.

// seriesKey is one controller of one member.
type seriesKey struct{ cluster, controller string }

// reconcileCount is a controller's reconciles and errors in one member.
type reconcileCount struct{ total, errors float64 }

// reconcileCounts are the mccr_reconcile_ counters, cluster → controller.
type reconcileCounts struct {
	byCluster map[string]map[string]reconcileCount
}

func (rc reconcileCounts) add(cluster, controller string, total, errors float64) {
	ctrls := rc.byCluster[cluster]
	if ctrls == nil {
		ctrls = map[string]reconcileCount{}
		rc.byCluster[cluster] = ctrls
	}
	c := ctrls[controller]
	c.total += total
	c.errors += errors
	ctrls[controller] = c
}

// readReconcileCounts reads the mccr_reconcile_ counters of the members
// in statuses (the Server's) from their records, without gathering any
// series. The records are the process's, by cluster name: a member of
// another Server running alongside (in a test, or a program with two) is
// left out unless it has the name of one of this Server's, and then its
// counts add to this one's, as its series do (see memberSeriesSet). The
// page's totals add up its own rows.
func readReconcileCounts(statuses []ClusterStatus) reconcileCounts {
	rc := reconcileCounts{byCluster: make(map[string]map[string]reconcileCount, len(statuses))}
	names := func(yield func(string) bool) {
		for i := range statuses {
			if !yield(statuses[i].Name) {
				return
			}
		}
	}
	memberSeriesSet.eachOf(names, func(name string, m *memberSeries) {
		for _, c := range m.controllers {
			rc.add(name, c.name, float64(c.total()), float64(c.errors))
		}
	})
	return rc
}

// queueDepths keeps the last reading of the workqueue depths, which views
// share for up to queueDepthsMaxAge.
type queueDepths struct {
	mu     sync.Mutex
	at     time.Time
	depths map[string]float64
}

const queueDepthsMaxAge = 5 * time.Second

func (q *queueDepths) read(now time.Time) map[string]float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.depths == nil || now.Sub(q.at) >= queueDepthsMaxAge || now.Before(q.at) {
		q.depths, q.at = readQueueDepths(), now
	}
	return q.depths
}

// readQueueDepths reads controller-runtime's workqueue_depth per queue
// name (a controller's name): from its vector alone when it can be found
// (workqueueDepth), else by gathering the whole registry, which at 10,000
// members means the mccr_ series of every one of them, some hundreds of
// milliseconds of CPU.
func readQueueDepths() map[string]float64 {
	out := map[string]float64{}
	add := func(m *dto.Metric) {
		for _, l := range m.GetLabel() {
			if l.GetName() == "name" {
				out[l.GetValue()] += m.GetGauge().GetValue()
			}
		}
	}
	if c := workqueueDepth(); c != nil {
		ch := make(chan prometheus.Metric, 64)
		go func() {
			c.Collect(ch)
			close(ch)
		}()
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) == nil {
				add(&d)
			}
		}
		return out
	}
	families, _ := metrics.Registry.Gather() // a partial answer is still worth showing
	for _, f := range families {
		if f.GetName() == workqueueDepthName {
			for _, m := range f.GetMetric() {
				add(m)
			}
		}
	}
	return out
}

const workqueueDepthName = "workqueue_depth"

// workqueueDepth is controller-runtime's workqueue_depth vector, which it
// registers but does not export: registering one described the same way
// makes the registry answer with the one it has (AlreadyRegisteredError).
// Nil if that fails (a controller-runtime that describes it otherwise).
var workqueueDepth = sync.OnceValue(func() prometheus.Collector {
	like := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: workqueueDepthName,
		Help: "Current depth of workqueue by workqueue and priority",
	}, []string{"name", "controller", "priority"})
	err := metrics.Registry.Register(like)
	var dup prometheus.AlreadyRegisteredError
	switch {
	case errors.As(err, &dup):
		return dup.ExistingCollector
	case err == nil:
		metrics.Registry.Unregister(like) // controller-runtime registers none
	}
	return nil
})

// controllerTotals adds each controller up over the members.
func controllerTotals(rc reconcileCounts, rates map[seriesKey]float64, depths map[string]float64) []fleetz.ControllerTotals {
	byName := map[string]*fleetz.ControllerTotals{}
	get := func(name string) *fleetz.ControllerTotals {
		t := byName[name]
		if t == nil {
			t = &fleetz.ControllerTotals{Name: name}
			byName[name] = t
		}
		return t
	}
	for cl, ctrls := range rc.byCluster {
		for name, c := range ctrls {
			t := get(name)
			t.Reconciles += c.total
			t.Errors += c.errors
			if r, ok := rates[seriesKey{cl, name}]; ok {
				if t.Rate == nil {
					t.Rate = new(float64)
				}
				*t.Rate += r
			}
		}
	}
	for name, d := range depths {
		if t := byName[name]; t != nil { // a queue of a member controller, not of the host's
			t.QueueDepth = &d
		}
	}
	out := make([]fleetz.ControllerTotals, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		out = append(out, *byName[name])
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
