package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/test"
)

// Noisy neighbours: one engine runs a ConfigMap controller on two clusters,
// each its own API server (the package's members a and b). Cluster "noisy"
// receives a burst of updates, as fast as its API server takes them, from
// writers in another process; cluster "quiet" gets one change every 20ms.
// What the benchmark measures is how long the quiet cluster's changes take
// to reach its Reconcile while the burst runs, against the same with no
// burst: whatever the clusters share in the engine (a client, a lock, a
// queue, metrics, logging, the CPU) shows up as the difference.

const (
	noisyCluster = "noisy"
	quietCluster = "quiet"
	// probeName is the quiet cluster's ConfigMap whose data.seq changes
	// every probeEvery.
	probeName  = "probe"
	probeEvery = 20 * time.Millisecond
	// burstStarted is the line a burst's child prints once its writers
	// have begun.
	burstStarted = "burst: writers started"
)

// BenchmarkNoisyNeighbour measures, with an mccr Server, the quiet cluster's change
// → Reconcile latency (from the write of data.seq until the first
// Reconcile that reads it, or a later seq) alone, over aloneFor, and
// during a burst of burstUpdates updates (merge patches of data.seq over
// burstObjects ConfigMaps, burstWriters at a time) on the noisy cluster.
// It reports p50 and p99 of both, the burst's rate, and how many update
// events and Reconciles the noisy cluster's controller had: every update
// must reach it, and how long after the burst's last write its last event
// came (s-noisy-behind). runNeighbours runs the plain controller-runtime
// engine too: add enginePlain to engines to compare (it is left out so that
// make bench stays short: a burst takes most of a minute on a shared
// two-core machine).
func BenchmarkNoisyNeighbour(b *testing.B) {
	const (
		burstUpdates = 20000
		burstObjects = 100
		burstWriters = 8
		aloneFor     = 5 * time.Second
	)
	engines := []string{engineMCCR}
	for _, eng := range engines {
		b.Run(eng, func(b *testing.B) {
			ns := namespace(b, test.NamespaceName(b))
			configMaps(b, "a", ns, burstObjects)
			probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: probeName, Namespace: ns}, Data: map[string]string{"seq": "0"}}
			if err := adminClient(b, "b").Create(context.Background(), probe); err != nil && !apierrors.IsAlreadyExists(err) {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				fig := runNeighbours(b, eng, ns, neighbourBurst{Updates: burstUpdates, Objects: burstObjects, Writers: burstWriters}, aloneFor)
				b.ReportMetric(ms(fig.alone.p50), "ms-p50-alone")
				b.ReportMetric(ms(fig.alone.p99), "ms-p99-alone")
				b.ReportMetric(ms(fig.neighbour.p50), "ms-p50-neighbour")
				b.ReportMetric(ms(fig.neighbour.p99), "ms-p99-neighbour")
				b.ReportMetric(float64(fig.burst.Updates)/fig.burst.Took.Seconds(), "updates/s-burst")
				b.ReportMetric(float64(fig.noisyEvents), "events-noisy")
				b.ReportMetric(float64(fig.noisyReconciles), "reconciles-noisy")
				b.ReportMetric(fig.noisyBehind.Seconds(), "s-noisy-behind")
			}
		})
	}
}

// latencies are the p50 and p99 of a phase's samples.
type latencies struct {
	p50, p99 time.Duration
	n        int
}

func latenciesOf(samples []time.Duration) latencies {
	slices.Sort(samples)
	return latencies{p50: percentile(samples, 0.50), p99: percentile(samples, 0.99), n: len(samples)}
}

type neighbourFigures struct {
	alone, neighbour latencies
	burst            burstResult
	noisyEvents      int64
	noisyReconciles  int64
	noisyBehind      time.Duration
}

// probeLog pairs each seq written to the quiet cluster's probe with the
// first Reconcile that read it (or a later seq: the queue folds changes
// that come faster than it works).
type probeLog struct {
	mu      sync.Mutex
	written map[int]time.Time
	seen    map[int]time.Time
	highest int
}

func newProbeLog() *probeLog {
	return &probeLog{written: map[int]time.Time{}, seen: map[int]time.Time{}, highest: -1}
}

func (p *probeLog) write(seq int, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written[seq] = at
}

func (p *probeLog) observe(seq int, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := p.highest + 1; s <= seq; s++ {
		p.seen[s] = at
	}
	p.highest = max(p.highest, seq)
}

func (p *probeLog) reached(seq int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.highest >= seq
}

// latencies returns write → Reconcile of the seqs in [from, to).
func (p *probeLog) latencies(from, to int) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]time.Duration, 0, to-from)
	for s := from; s < to; s++ {
		out = append(out, p.seen[s].Sub(p.written[s]))
	}
	return out
}

// writeProbes writes data.seq of the quiet cluster's probe every probeEvery,
// from seq next on, until stop is closed, and returns the next seq.
func writeProbes(tb testing.TB, cl client.Client, ns string, log *probeLog, next int, stop <-chan struct{}) int {
	tb.Helper()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return next
		case <-tick.C:
		}
		log.write(next, time.Now())
		if err := setSeq(context.Background(), cl, ns, probeName, next); err != nil {
			tb.Fatalf("cluster %s: writing %s/%s seq %d: %v", quietCluster, ns, probeName, next, err)
		}
		next++
	}
}

func runNeighbours(tb testing.TB, engineName, ns string, burst neighbourBurst, aloneFor time.Duration) neighbourFigures {
	tb.Helper()
	probes := newProbeLog()
	var events, reconciles atomic.Int64
	countEvents := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectNew.GetName() != probeName {
			events.Add(1)
		}
		return true
	}}
	work := controllerWork{
		kinds:   1,
		forOpts: []builder.ForOption{builder.WithPredicates(countEvents)},
		reconcile: func(ctx context.Context, cl client.Client, cluster string, req ctrl.Request) (ctrl.Result, error) {
			var cm corev1.ConfigMap
			if err := cl.Get(ctx, req.NamespacedName, &cm); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
			switch cluster {
			case noisyCluster:
				reconciles.Add(1)
			case quietCluster:
				if seq, err := strconv.Atoi(cm.Data["seq"]); err == nil && req.Name == probeName {
					probes.observe(seq, time.Now())
				}
			}
			return ctrl.Result{}, nil
		},
	}
	e := startEngine(tb, engineName, fleet.Cluster("host").Config, ns, work)
	defer func() {
		if err := e.stop(); err != nil {
			tb.Error(err)
		}
	}()
	for name, member := range map[string]string{noisyCluster: "a", quietCluster: "b"} {
		cfg := loadOne(tb, fleet.Cluster(member).KubeconfigPath).Config
		if err := e.register(config.NewNamedConfig(name, cfg)); err != nil {
			tb.Fatal(err)
		}
	}
	writer := adminClient(tb, "b")
	// The probe's present seq, whatever it is, reconciled: the quiet
	// cluster's controller runs.
	test.Eventually(tb, time.Minute, "the quiet cluster's first Reconcile", func() bool { return probes.reached(0) })
	test.Eventually(tb, time.Minute, "the noisy cluster's first Reconcile", func() bool { return reconciles.Load() > 0 })

	var fig neighbourFigures
	next := probes.highestSeen() + 1

	// Alone.
	stop := make(chan struct{})
	time.AfterFunc(aloneFor, func() { close(stop) })
	from := next
	next = writeProbes(tb, writer, ns, probes, next, stop)
	waitProbes(tb, probes, next)
	fig.alone = latenciesOf(probes.latencies(from, next))

	// During the burst.
	eventsBefore, reconcilesBefore := events.Load(), reconciles.Load()
	child := startBurst(tb, burst, ns)
	stopProfile := cpuProfile(tb, "burst")
	stop = make(chan struct{})
	go func() {
		child.wait()
		close(stop)
	}()
	from = next
	next = writeProbes(tb, writer, ns, probes, next, stop)
	burstEnd := time.Now()
	stopProfile()
	fig.burst = child.result(tb)
	waitProbes(tb, probes, next)
	fig.neighbour = latenciesOf(probes.latencies(from, next))
	if fig.neighbour.n < 10 {
		tb.Fatalf("only %d changes of the quiet cluster during the burst", fig.neighbour.n)
	}
	test.Eventually(tb, 5*time.Minute, "every update of the burst reaching the noisy cluster's controller", func() bool {
		return events.Load()-eventsBefore >= int64(burst.Updates)
	})
	fig.noisyBehind = time.Since(burstEnd)
	fig.noisyEvents = events.Load() - eventsBefore
	fig.noisyReconciles = reconciles.Load() - reconcilesBefore
	n, notes := e.failures()
	checkFailures(tb, n, notes)
	return fig
}

func (p *probeLog) highestSeen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.highest
}

// waitProbes waits until every seq below next has been reconciled.
func waitProbes(tb testing.TB, p *probeLog, next int) {
	tb.Helper()
	test.Eventually(tb, time.Minute, fmt.Sprintf("the quiet cluster reconciling its probe at seq %d", next-1), func() bool {
		return p.reached(next - 1)
	})
}

// neighbourBurst is what a burst's child process writes.
type neighbourBurst struct {
	Updates, Objects, Writers int
	Kubeconfig                string // the noisy cluster's API server
	Namespace                 string
	Result                    string // where the child writes its burstResult
}

// burstResult is what a burst's child did.
type burstResult struct {
	Updates int
	Took    time.Duration
}

// burstChild is a running burst.
type burstChild struct {
	spec    neighbourBurst
	out     *syncBuffer
	started chan struct{}
	once    sync.Once
	waited  chan struct{}
	err     error
}

// Write takes the child's output, and tells when its writers have begun.
func (c *burstChild) Write(p []byte) (int, error) {
	n, err := c.out.Write(p)
	if strings.Contains(c.out.String(), burstStarted+"\n") {
		c.once.Do(func() { close(c.started) })
	}
	return n, err
}

// startBurst starts the burst in a child process (this test binary again,
// as scale runs are), so that its writers' CPU and memory are not the
// engine's process's, and returns once its writers have begun.
func startBurst(tb testing.TB, burst neighbourBurst, ns string) *burstChild {
	tb.Helper()
	dir := tb.TempDir()
	burst.Kubeconfig = fleet.Cluster("a").KubeconfigPath
	burst.Namespace = ns
	burst.Result = filepath.Join(dir, "burst.json")
	cmd := childCommand(tb, dir, scaleSpec{Burst: &burst})
	c := &burstChild{spec: burst, out: &syncBuffer{}, started: make(chan struct{}), waited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c, c
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		c.err = cmd.Wait()
		close(c.waited)
	}()
	select {
	case <-c.started:
	case <-c.waited:
		tb.Fatalf("the burst's child ended before its writers began: %v\n%s", c.err, c.out)
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		tb.Fatalf("the burst's child did not start its writers within a minute:\n%s", c.out)
	}
	return c
}

func (c *burstChild) wait() { <-c.waited }

func (c *burstChild) result(tb testing.TB) burstResult {
	tb.Helper()
	c.wait()
	if c.err != nil {
		tb.Fatalf("the burst's child: %v\n%s", c.err, c.out)
	}
	raw, err := os.ReadFile(c.spec.Result)
	if err != nil {
		tb.Fatalf("the burst's child wrote no result: %v\n%s", err, c.out)
	}
	var r burstResult
	if err := json.Unmarshal(raw, &r); err != nil {
		tb.Fatal(err)
	}
	if r.Updates != c.spec.Updates {
		tb.Fatalf("the burst made %d updates, want %d\n%s", r.Updates, c.spec.Updates, c.out)
	}
	return r
}

// runBurst is a burst's child: spec.Writers goroutines patch data.seq of
// spec.Objects ConfigMaps (cm-0…) in turn, spec.Updates patches in all,
// through one client without a client-side rate limit.
func runBurst(tb testing.TB, spec neighbourBurst) {
	tb.Helper()
	cfg := loadOne(tb, spec.Kubeconfig).Config
	cfg.QPS = -1
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	var (
		n    atomic.Int64
		done atomic.Int64
		wg   sync.WaitGroup
		errs = make([]error, spec.Writers)
	)
	begin := time.Now()
	fmt.Println(burstStarted)
	for w := range spec.Writers {
		wg.Go(func() {
			for {
				i := int(n.Add(1))
				if i > spec.Updates {
					return
				}
				if err := setSeq(context.Background(), cl, spec.Namespace, fmt.Sprintf("cm-%d", i%spec.Objects), i); err != nil {
					errs[w] = err
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	res := burstResult{Updates: int(done.Load()), Took: time.Since(begin)}
	for _, err := range errs {
		if err != nil {
			tb.Errorf("cluster %s: %v", noisyCluster, err)
		}
	}
	raw, err := json.Marshal(res)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(spec.Result, raw, 0o600); err != nil {
		tb.Fatal(err)
	}
}
