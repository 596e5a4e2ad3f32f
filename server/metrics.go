package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The Server's per-cluster metrics are served on the host Manager's metrics
// endpoint (controller-runtime's registry), each with a cluster label.
// controller-runtime's own controller metrics (reconcile counts, queue
// depth) carry only the controller name: the same controller in every
// member adds to the same series.
var (
	clusterReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mccr_cluster_ready",
		Help: "1 while the member cluster is Ready (caches synced, reconciling), else 0.",
	}, []string{"cluster"})
	clusterTimeToReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mccr_cluster_time_to_ready_seconds",
		Help: "How long the member cluster's last successful start took, to synced caches.",
	}, []string{"cluster"})
	clusterFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_cluster_failures_total",
		Help: "Failed starts and credential losses of the member cluster.",
	}, []string{"cluster"})
	clusterRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_cluster_restarts_total",
		Help: "Starts of the member cluster's Manager after its first one.",
	}, []string{"cluster"})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(clusterReady, clusterTimeToReady, clusterFailures, clusterRestarts)
	})
}

// clusterSeries is one cluster's metric series. Its owner (the cluster
// record) calls it under its lock, and forget only once no generation can
// report any more, so a deleted cluster's series never come back.
type clusterSeries struct{ name string }

// init makes every series exist from the start, at zero: a counter that
// appears only after its first increment defeats rate() and alerting on
// absence.
func (s clusterSeries) init() {
	clusterReady.WithLabelValues(s.name)
	clusterFailures.WithLabelValues(s.name)
	clusterRestarts.WithLabelValues(s.name)
}

func (s clusterSeries) ready(ready bool) {
	v := 0.0
	if ready {
		v = 1
	}
	clusterReady.WithLabelValues(s.name).Set(v)
}

func (s clusterSeries) timeToReady(d time.Duration) {
	clusterTimeToReady.WithLabelValues(s.name).Set(d.Seconds())
}

func (s clusterSeries) failure() { clusterFailures.WithLabelValues(s.name).Inc() }
func (s clusterSeries) restart() { clusterRestarts.WithLabelValues(s.name).Inc() }

func (s clusterSeries) forget() {
	clusterReady.DeleteLabelValues(s.name)
	clusterTimeToReady.DeleteLabelValues(s.name)
	clusterFailures.DeleteLabelValues(s.name)
	clusterRestarts.DeleteLabelValues(s.name)
}
