package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	membermgr "github.com/mccr-dev/mccr/internal/member"
)

// The Server's per-cluster metrics are served on the host Manager's metrics
// endpoint (controller-runtime's registry), each with a cluster label.
// controller-runtime's own controller metrics (reconcile counts, queue
// depth) carry only the controller name: the same controller in every
// member adds to the same series. The mccr_reconcile_ series count the
// same reconciles per cluster; controller-runtime's stay as they are.
// clusterLabelName is the label naming the member cluster of a series.
const clusterLabelName = "cluster"

var (
	clusterReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mccr_cluster_ready",
		Help: "1 while the member cluster is Ready (caches synced, reconciling), else 0.",
	}, []string{clusterLabelName})
	clusterTimeToReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mccr_cluster_time_to_ready_seconds",
		Help: "How long the member cluster's last successful start took, to synced caches.",
	}, []string{clusterLabelName})
	clusterFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_cluster_failures_total",
		Help: "Failed starts and credential losses of the member cluster.",
	}, []string{clusterLabelName})
	clusterSetupErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_cluster_setup_errors_total",
		Help: "Failed starts of the member cluster because a reconciler setup returned an error or panicked (each also counts in mccr_cluster_failures_total).",
	}, []string{clusterLabelName})
	clusterRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_cluster_restarts_total",
		Help: "Starts of the member cluster's Manager after its first one.",
	}, []string{clusterLabelName})
	clusterReachable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mccr_cluster_reachable",
		Help: "1 while the member cluster's API server answered its last reachability probe, else 0 (also before the first).",
	}, []string{clusterLabelName})
	// Probes answer in milliseconds, or time out (ReachProbeTimeout).
	clusterProbeTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mccr_cluster_probe_seconds",
		Help:    "How long the member cluster's reachability probes took (up to the probe timeout when unanswered).",
		Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10},
	}, []string{clusterLabelName})

	clusterPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mccr_cluster_phase",
		Help: "1 for the member cluster's current phase (Pending, Starting, Syncing, Ready, Unreachable, Failed, Stopping, Stopped, Elsewhere); only that phase's series exists. sum by (phase) counts the fleet per phase.",
	}, []string{clusterLabelName, "phase"})
	watchErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_watch_errors_total",
		Help: "Errors of the watchers given to Server.Watch (broken files or objects, events the Server could not apply), by the watcher's Go type.",
	}, []string{"watcher"})

	reconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_reconcile_total",
		Help: "Reconciles of a member cluster's controller, by result (success, error, requeue, requeue_after).",
	}, []string{clusterLabelName, "controller", "result"})
	reconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_reconcile_errors_total",
		Help: "Reconciles of a member cluster's controller that returned an error.",
	}, []string{clusterLabelName, "controller"})
	// Few buckets: the series count is clusters × controllers × buckets.
	reconcileTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mccr_reconcile_time_seconds",
		Help:    "How long Reconcile of a member cluster's controller took.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 1, 2.5, 10, 60},
	}, []string{clusterLabelName, "controller"})

	shardOwned = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mccr_shard_clusters_owned",
		Help: "Clusters whose Lease this replica holds (sharding).",
	}, []string{"replica"})
	shardHandovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_shard_handovers_total",
		Help: "Clusters this replica took over from another replica, released or expired (sharding).",
	}, []string{"replica"})
	shardUnowned = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mccr_shard_unowned_seconds",
		Help:    "Per handover, how long no replica ran the cluster: from its release, or its holder's last heartbeat, to its takeover (sharding).",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60},
	}, []string{"replica"})
	shardDuplicate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mccr_shard_duplicate_identity",
		Help: "1 while another process renews this replica's Lease (two replicas share one identity; this one runs no cluster meanwhile), else 0 (sharding).",
	}, []string{"replica"})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(clusterReady, clusterTimeToReady, clusterFailures, clusterSetupErrors, clusterRestarts,
			clusterReachable, clusterProbeTime, clusterPhase, watchErrorsTotal, reconcileTotal, reconcileErrors, reconcileTime, shardOwned, shardHandovers, shardUnowned, shardDuplicate)
	})
}

// allPhases are the values of mccr_cluster_phase's phase label.
var allPhases = []Phase{PhasePending, PhaseStarting, PhaseSyncing, PhaseReady, PhaseUnreachable, PhaseFailed, PhaseStopping, PhaseStopped, PhaseElsewhere}

// handOverKind is the watcher label of an error from handing a name over
// to a waiting watcher's config, when a name added by hand is deleted.
const handOverKind = "handover"

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
	clusterSetupErrors.WithLabelValues(s.name)
	clusterRestarts.WithLabelValues(s.name)
	clusterReachable.WithLabelValues(s.name)
}

// phase records the cluster's phase: mccr_cluster_ready, and the one
// series of mccr_cluster_phase.
func (s clusterSeries) phase(p Phase) {
	v := 0.0
	if p == PhaseReady {
		v = 1
	}
	clusterReady.WithLabelValues(s.name).Set(v)
	for _, other := range allPhases {
		if other != p {
			clusterPhase.DeleteLabelValues(s.name, string(other))
		}
	}
	clusterPhase.WithLabelValues(s.name, string(p)).Set(1)
}

func (s clusterSeries) timeToReady(d time.Duration) {
	clusterTimeToReady.WithLabelValues(s.name).Set(d.Seconds())
}

// failure counts a failed start; setup says a reconciler setup failed it.
func (s clusterSeries) failure(setup bool) {
	clusterFailures.WithLabelValues(s.name).Inc()
	if setup {
		clusterSetupErrors.WithLabelValues(s.name).Inc()
	}
}

func (s clusterSeries) restart() { clusterRestarts.WithLabelValues(s.name).Inc() }

// probed records a reachability probe: answered or not, and how long it
// took.
func (s clusterSeries) probed(answered bool, took time.Duration) {
	v := 0.0
	if answered {
		v = 1
	}
	clusterReachable.WithLabelValues(s.name).Set(v)
	clusterProbeTime.WithLabelValues(s.name).Observe(took.Seconds())
}

// reconciled counts one Reconcile of a member's controller. Its generation
// calls it without the cluster's lock: reconciles end before the
// generation's Manager has stopped, and forget comes after that.
func (s clusterSeries) reconciled(controller, result string, took time.Duration) {
	reconcileTotal.WithLabelValues(s.name, controller, result).Inc()
	if result == membermgr.ResultError {
		reconcileErrors.WithLabelValues(s.name, controller).Inc()
	}
	reconcileTime.WithLabelValues(s.name, controller).Observe(took.Seconds())
}

func (s clusterSeries) forget() {
	clusterReady.DeleteLabelValues(s.name)
	clusterTimeToReady.DeleteLabelValues(s.name)
	clusterFailures.DeleteLabelValues(s.name)
	clusterSetupErrors.DeleteLabelValues(s.name)
	clusterRestarts.DeleteLabelValues(s.name)
	clusterReachable.DeleteLabelValues(s.name)
	clusterProbeTime.DeleteLabelValues(s.name)
	for _, p := range allPhases {
		clusterPhase.DeleteLabelValues(s.name, string(p))
	}
	byCluster := prometheus.Labels{clusterLabelName: s.name}
	reconcileTotal.DeletePartialMatch(byCluster)
	reconcileErrors.DeletePartialMatch(byCluster)
	reconcileTime.DeletePartialMatch(byCluster)
}

// shardSeries is a sharded replica's series (shard.Metrics).
type shardSeries struct{ replica string }

func (s shardSeries) Owned(n int) { shardOwned.WithLabelValues(s.replica).Set(float64(n)) }

func (s shardSeries) Handover(unowned time.Duration) {
	shardHandovers.WithLabelValues(s.replica).Inc()
	shardUnowned.WithLabelValues(s.replica).Observe(unowned.Seconds())
}

func (s shardSeries) DuplicateIdentity(dup bool) {
	v := 0.0
	if dup {
		v = 1
	}
	shardDuplicate.WithLabelValues(s.replica).Set(v)
}
