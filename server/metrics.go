package server

import (
	"iter"
	"slices"
	"strings"
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
//
// The per-cluster series are not prometheus vectors but one small record
// per member (memberSeries), turned into series when the registry is
// gathered. A vector keeps a hashed, labelled object per series (some 6 KiB
// per member for these) and can drop a cluster's series only by scanning
// every series of every member (DeletePartialMatch), which made Delete
// linear in the fleet: at 10,000 members the deletes alone came to
// quadratic time. A record is a map entry to drop, and a few hundred bytes.
// clusterLabelName is the label naming the member cluster of a series.
const clusterLabelName = "cluster"

// The per-cluster series' descriptions.
var (
	clusterReadyDesc = prometheus.NewDesc("mccr_cluster_ready",
		"1 while the member cluster is Ready (caches synced, reconciling), else 0.",
		[]string{clusterLabelName}, nil)
	clusterTimeToReadyDesc = prometheus.NewDesc("mccr_cluster_time_to_ready_seconds",
		"How long the member cluster's last successful start took, to synced caches.",
		[]string{clusterLabelName}, nil)
	clusterFailuresDesc = prometheus.NewDesc("mccr_cluster_failures_total",
		"Failed starts and credential losses of the member cluster.",
		[]string{clusterLabelName}, nil)
	clusterSetupErrorsDesc = prometheus.NewDesc("mccr_cluster_setup_errors_total",
		"Failed starts of the member cluster because a reconciler setup returned an error or panicked (each also counts in mccr_cluster_failures_total).",
		[]string{clusterLabelName}, nil)
	clusterRestartsDesc = prometheus.NewDesc("mccr_cluster_restarts_total",
		"Starts of the member cluster's Manager after its first one.",
		[]string{clusterLabelName}, nil)
	clusterReachableDesc = prometheus.NewDesc("mccr_cluster_reachable",
		"1 while the member cluster's API server answered its last reachability probe, else 0 (also before the first).",
		[]string{clusterLabelName}, nil)
	clusterProbeTimeDesc = prometheus.NewDesc("mccr_cluster_probe_seconds",
		"How long the member cluster's reachability probes took (up to the probe timeout when unanswered).",
		[]string{clusterLabelName}, nil)
	clusterPhaseDesc = prometheus.NewDesc("mccr_cluster_phase",
		"1 for the member cluster's current phase (Pending, Queued, Starting, Syncing, Ready, Unreachable, Failed, Stopping, Stopped, Elsewhere); only that phase's series exists. sum by (phase) counts the fleet per phase.",
		[]string{clusterLabelName, "phase"}, nil)

	reconcileTotalDesc = prometheus.NewDesc("mccr_reconcile_total",
		"Reconciles of a member cluster's controller, by result (success, error, requeue, requeue_after).",
		[]string{clusterLabelName, "controller", "result"}, nil)
	reconcileErrorsDesc = prometheus.NewDesc("mccr_reconcile_errors_total",
		"Reconciles of a member cluster's controller that returned an error.",
		[]string{clusterLabelName, "controller"}, nil)
	reconcileTimeDesc = prometheus.NewDesc("mccr_reconcile_time_seconds",
		"How long Reconcile of a member cluster's controller took.",
		[]string{clusterLabelName, "controller"}, nil)
)

var (
	// Probes answer in milliseconds, or time out (ReachProbeTimeout).
	probeBuckets = []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10}
	// Few buckets: the series count is clusters × controllers × buckets.
	reconcileBuckets = []float64{0.005, 0.025, 0.1, 0.25, 1, 2.5, 10, 60}
)

var (
	watchErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mccr_watch_errors_total",
		Help: "Errors of the watchers given to Server.Watch (broken files or objects, events the Server could not apply), by the watcher's Go type.",
	}, []string{"watcher"})

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
		Help:    "Per handover, how long no replica ran the cluster, by the taking replica's own clock: from when it saw the release, or last saw the holder's heartbeat, to its takeover (sharding).",
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
		metrics.Registry.MustRegister(&memberSeriesSet, watchErrorsTotal, shardOwned, shardHandovers, shardUnowned, shardDuplicate)
	})
}

// handOverKind is the watcher label of an error from handing a name over
// to a waiting watcher's config, when a name added by hand is deleted.
const handOverKind = "handover"

// memberSeriesSet holds the series of every member of every Server of the
// process, by cluster name, as the vectors they replace did. Two Servers
// of one process that both have a member of the same name share its series
// (its counters add up, its gauges show the last change of either), and
// the series stay until neither has the name.
var memberSeriesSet seriesSet

// seriesSet is the members' series by cluster name; it is the registry's
// Collector of them.
type seriesSet struct {
	mu     sync.RWMutex
	byName map[string]*memberSeries
}

// lookup returns name's record, nil if no cluster record holds it.
func (s *seriesSet) lookup(name string) *memberSeries {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byName[name]
}

// hold counts one more cluster record that has name's series, making them
// if it is the first.
func (s *seriesSet) hold(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byName[name]
	if m == nil {
		if s.byName == nil {
			s.byName = map[string]*memberSeries{}
		}
		m = &memberSeries{label: validLabel(name)}
		s.byName[name] = m
	}
	m.holders++
}

// release counts one record fewer, and drops name's series with the last.
func (s *seriesSet) release(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.byName[name]; m != nil {
		if m.holders--; m.holders <= 0 {
			delete(s.byName, name)
		}
	}
}

// seriesEntry is a record and its name, as each and eachOf visit them.
type seriesEntry struct {
	name string
	m    *memberSeries
}

// each calls fn with every member's record, locked, in no order.
func (s *seriesSet) each(fn func(name string, m *memberSeries)) {
	s.mu.RLock()
	all := make([]seriesEntry, 0, len(s.byName))
	for name, m := range s.byName {
		all = append(all, seriesEntry{name, m})
	}
	s.mu.RUnlock()
	visit(all, fn)
}

// eachOf calls fn with the record of each of names that has one, locked,
// in the order of names: one Server's members, where the set holds those
// of every Server of the process.
func (s *seriesSet) eachOf(names iter.Seq[string], fn func(name string, m *memberSeries)) {
	var some []seriesEntry
	s.mu.RLock()
	for name := range names {
		if m := s.byName[name]; m != nil {
			some = append(some, seriesEntry{name, m})
		}
	}
	s.mu.RUnlock()
	visit(some, fn)
}

// visit calls fn with each record, under the record's lock alone.
func visit(entries []seriesEntry, fn func(name string, m *memberSeries)) {
	for _, e := range entries {
		e.m.mu.Lock()
		fn(e.name, e.m)
		e.m.mu.Unlock()
	}
}

// Describe implements prometheus.Collector.
func (s *seriesSet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clusterReadyDesc, clusterTimeToReadyDesc, clusterFailuresDesc, clusterSetupErrorsDesc,
		clusterRestartsDesc, clusterReachableDesc, clusterProbeTimeDesc, clusterPhaseDesc, reconcileTotalDesc, reconcileErrorsDesc, reconcileTimeDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: each member's series as they
// are now.
func (s *seriesSet) Collect(ch chan<- prometheus.Metric) {
	s.each(func(_ string, m *memberSeries) { m.collect(ch) })
}

// memberSeries is one member's series. Which of them exist follows what
// happened to the member: see clusterSeries.
type memberSeries struct {
	label                           string // the cluster label's value
	holders                         int    // cluster records that have it (seriesSet.mu)
	mu                              sync.Mutex
	initialised                     bool
	ready, reachable                bool
	phase                           Phase // no series while ""
	timeToReady                     *time.Duration
	failures, setupErrors, restarts uint64
	probes                          *histogram
	controllers                     []*controllerSeries // by first reconcile
}

// controllerSeries is one controller's series in one member.
type controllerSeries struct {
	name    string
	label   string        // the controller label's value
	results []resultCount // by first occurrence
	errors  uint64
	erred   bool // mccr_reconcile_errors_total exists once one did
	time    histogram
}

type resultCount struct {
	result string
	n      uint64
}

func (m *memberSeries) controller(name string) *controllerSeries {
	for _, c := range m.controllers {
		if c.name == name {
			return c
		}
	}
	c := &controllerSeries{name: name, label: validLabel(name), time: newHistogram(reconcileBuckets)}
	m.controllers = append(m.controllers, c)
	return c
}

func (c *controllerSeries) count(result string) {
	for i := range c.results {
		if c.results[i].result == result {
			c.results[i].n++
			return
		}
	}
	c.results = append(c.results, resultCount{result, 1})
}

// total is the controller's reconciles, whatever their result.
func (c *controllerSeries) total() uint64 {
	var n uint64
	for _, r := range c.results {
		n += r.n
	}
	return n
}

func (m *memberSeries) collect(ch chan<- prometheus.Metric) {
	name := m.label
	if m.initialised || m.phase != "" {
		ch <- gauge(clusterReadyDesc, m.ready, name)
	}
	if m.initialised {
		ch <- counter(clusterFailuresDesc, m.failures, name)
		ch <- counter(clusterSetupErrorsDesc, m.setupErrors, name)
		ch <- counter(clusterRestartsDesc, m.restarts, name)
		ch <- gauge(clusterReachableDesc, m.reachable, name)
	}
	if m.phase != "" {
		ch <- prometheus.MustNewConstMetric(clusterPhaseDesc, prometheus.GaugeValue, 1, name, string(m.phase))
	}
	if m.timeToReady != nil {
		ch <- prometheus.MustNewConstMetric(clusterTimeToReadyDesc, prometheus.GaugeValue, m.timeToReady.Seconds(), name)
	}
	if m.probes != nil {
		ch <- m.probes.metric(clusterProbeTimeDesc, probeBuckets, name)
	}
	for _, c := range m.controllers {
		for _, r := range c.results {
			ch <- counter(reconcileTotalDesc, r.n, name, c.label, validLabel(r.result))
		}
		if c.erred {
			ch <- counter(reconcileErrorsDesc, c.errors, name, c.label)
		}
		ch <- c.time.metric(reconcileTimeDesc, reconcileBuckets, name, c.label)
	}
}

// validLabel makes v a label value the registry accepts: names from outside
// the program that are not UTF-8 keep their series, with the replacement
// character for what is not, rather than fail the scrape.
func validLabel(v string) string { return strings.ToValidUTF8(v, "\uFFFD") }

func gauge(d *prometheus.Desc, on bool, labels ...string) prometheus.Metric {
	v := 0.0
	if on {
		v = 1
	}
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, n uint64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), labels...)
}

// histogram is one histogram series: its observations per bucket (not
// cumulative; the last counts those above every bound), their sum and
// count.
type histogram struct {
	counts []uint64
	sum    float64
	count  uint64
}

func newHistogram(buckets []float64) histogram {
	return histogram{counts: make([]uint64, len(buckets)+1)}
}

// observe counts v in the first bucket whose upper bound is at least v,
// as prometheus does.
func (h *histogram) observe(buckets []float64, v float64) {
	i, _ := slices.BinarySearch(buckets, v)
	h.counts[i]++
	h.sum += v
	h.count++
}

func (h *histogram) metric(d *prometheus.Desc, buckets []float64, labels ...string) prometheus.Metric {
	cumulative := make(map[float64]uint64, len(buckets))
	var n uint64
	for i, b := range buckets {
		n += h.counts[i]
		cumulative[b] = n
	}
	return prometheus.MustNewConstHistogram(d, h.count, h.sum, cumulative, labels...)
}

// clusterSeries is one cluster's metric series. Its owner (the cluster
// record) calls it under its lock. forget comes as the cluster is deleted,
// while its Manager may still stop: what that Manager reports afterwards
// finds no series (update) and is dropped, so a deleted cluster's series
// never come back. A name added again meanwhile starts new series, which
// its old Manager's last phases (Stopping, Stopped) are then about.
type clusterSeries struct {
	name string
	held bool // between init and forget: the record counts as a holder
}

// update changes the cluster's record under its lock.
func (s clusterSeries) update(fn func(m *memberSeries)) {
	m := memberSeriesSet.lookup(s.name)
	if m == nil {
		return // forgotten: what a member still reports as it ends is not news
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(m)
}

// init makes every series exist from the start, at zero: a counter that
// appears only after its first increment defeats rate() and alerting on
// absence.
func (s *clusterSeries) init() {
	if !s.held {
		memberSeriesSet.hold(s.name)
		s.held = true
	}
	s.update(func(m *memberSeries) { m.initialised = true })
}

// phase records the cluster's phase: mccr_cluster_ready, and the one
// series of mccr_cluster_phase.
func (s clusterSeries) phase(p Phase) {
	s.update(func(m *memberSeries) { m.ready, m.phase = p == PhaseReady, p })
}

func (s clusterSeries) timeToReady(d time.Duration) {
	s.update(func(m *memberSeries) { m.timeToReady = &d })
}

// failure counts a failed start; setup says a reconciler setup failed it.
func (s clusterSeries) failure(setup bool) {
	s.update(func(m *memberSeries) {
		m.failures++
		if setup {
			m.setupErrors++
		}
	})
}

func (s clusterSeries) restart() { s.update(func(m *memberSeries) { m.restarts++ }) }

// probed records a reachability probe: answered or not, and how long it
// took.
func (s clusterSeries) probed(answered bool, took time.Duration) {
	s.update(func(m *memberSeries) {
		m.reachable = answered
		if m.probes == nil {
			h := newHistogram(probeBuckets)
			m.probes = &h
		}
		m.probes.observe(probeBuckets, took.Seconds())
	})
}

// reconciled counts one Reconcile of a member's controller. Its generation
// calls it without the cluster's lock: a reconcile that ends after its
// cluster was deleted finds no series, as any late report does (but for
// a name added again meanwhile: it counts there).
func (s clusterSeries) reconciled(controller, result string, took time.Duration) {
	s.update(func(m *memberSeries) {
		c := m.controller(controller)
		c.count(result)
		if result == membermgr.ResultError {
			c.errors++
			c.erred = true
		}
		c.time.observe(reconcileBuckets, took.Seconds())
	})
}

// forget drops every series of the cluster, and only those, unless
// another Server of the process has a member of the same name.
func (s *clusterSeries) forget() {
	if s.held {
		memberSeriesSet.release(s.name)
		s.held = false
	}
}

// forgetSeries drops the series of every member of a Server whose Start
// has returned, once none of them runs any more. The registry they are
// served from is the process's: a later Server of the same process (a
// program that makes a new one after its Start returned, a test) would
// otherwise serve them on its own /metrics and fleet page, as Stopped
// members it does not have, and add them to the figures of its members of
// the same names. A record retired meanwhile is skipped: its name may be a
// new record's.
func (r *registry) forgetSeries() {
	for _, c := range r.all() {
		c.forgetSeries()
	}
}

// forgetSeries drops the cluster's series, unless it retired (its name
// may be a new record's).
func (c *cluster) forgetSeries() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dead {
		c.series.forget()
	}
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
