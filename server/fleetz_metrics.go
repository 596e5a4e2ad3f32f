package server

import (
	"maps"
	"slices"
	"sync"
	"time"

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

// readReconcileCounts reads the mccr_reconcile_ counters from the
// members' own records, without gathering any series.
func readReconcileCounts() reconcileCounts {
	rc := reconcileCounts{byCluster: map[string]map[string]reconcileCount{}}
	memberSeriesSet.each(func(name string, m *memberSeries) {
		for _, c := range m.controllers {
			rc.add(name, c.name, float64(c.total()), float64(c.errors))
		}
	})
	return rc
}

// queueDepths keeps the last reading of the workqueue depths. Reading them
// means gathering controller-runtime's whole registry — at 10,000 members
// mostly the mccr_ series, and more than half of a view's CPU — so views
// share a reading for up to queueDepthsMaxAge.
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
// name (a controller's name).
func readQueueDepths() map[string]float64 {
	families, _ := metrics.Registry.Gather() // a partial answer is still worth showing
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "workqueue_depth" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" {
					out[l.GetValue()] += m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

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
