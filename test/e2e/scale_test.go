package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// A scale run registers a fleet of clusters with an engine (an mccr Server,
// or a plain controller-runtime Manager per cluster) whose one controller
// Gets every ConfigMap of a namespace (and, with more kinds, watches the
// objects those ConfigMaps own: kinds_test.go), and measures what each
// cluster costs, in a process of its own (scalechild_test.go). Clusters are names
// over the package's three member API servers: each behind an endpoint of
// its own (test.NewEndpoints), as N real clusters are, or, for comparison
// with earlier figures, straight on the API servers (members of one API
// server then share connections and REST mappers).

// tally counts, per cluster, the distinct objects reconciled, and tells
// when a cluster's first Reconcile ran.
type tally struct {
	objects int

	mu       sync.Mutex
	seen     map[string]map[string]bool
	first    map[string]time.Time
	firstCh  map[string]chan struct{}
	complete int // clusters that reconciled every object
}

func newTally(objects int) *tally {
	return &tally{objects: objects, seen: map[string]map[string]bool{}, first: map[string]time.Time{}, firstCh: map[string]chan struct{}{}}
}

// get is the controller's Reconcile: Get the object, count it.
func (t *tally) get(ctx context.Context, cl client.Client, cluster string, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := cl.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.seen[cluster]
	if s == nil {
		s = map[string]bool{}
		t.seen[cluster] = s
		t.first[cluster] = now
		close(t.channelLocked(cluster))
	}
	if !s[req.Name] {
		s[req.Name] = true
		if len(s) == t.objects {
			t.complete++
		}
	}
	return ctrl.Result{}, nil
}

// firstReconcile returns a channel closed once the cluster has reconciled
// an object, and when it did (valid once the channel is closed).
func (t *tally) firstReconcile(cluster string) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.channelLocked(cluster)
}

func (t *tally) channelLocked(cluster string) chan struct{} {
	ch, ok := t.firstCh[cluster]
	if !ok {
		ch = make(chan struct{})
		t.firstCh[cluster] = ch
	}
	return ch
}

func (t *tally) firstAt(cluster string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first[cluster]
}

func (t *tally) completed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.complete
}

// controllerWork is what an engine's controller does, the same in both engines:
// For ConfigMaps (with forOpts), Owning kinds-1 more kinds
// (kindsController), Reconcile reading through cl, the engine's client of
// the request's cluster.
type controllerWork struct {
	kinds     int
	reconcile func(ctx context.Context, cl client.Client, cluster string, req ctrl.Request) (ctrl.Result, error)
	forOpts   []builder.ForOption
}

// engine runs the clusters of a run.
type engine interface {
	// register brings one more cluster in; its controller starts on its
	// own.
	register(nc *config.NamedConfig) error
	// failures counts what went wrong so far, with a line per cluster
	// that failed.
	failures() (n int, notes []string)
	stop() error
}

const (
	engineMCCR  = "mccr"
	enginePlain = "controller-runtime"
)

// cacheOptions caches the run's namespace only, the same way for both
// engines.
func cacheOptions(ns string) cache.Options {
	return cache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", ns)}
}

// mccrEngine is a Server whose members each run the controller; it reads
// through the fan-out client.
type mccrEngine struct {
	srv      *server.Server
	stopFunc func() error
}

func startMCCR(tb testing.TB, host *rest.Config, ns string, w controllerWork) *mccrEngine {
	tb.Helper()
	srv, err := server.NewServer(host, ctrl.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOptions(ns),
	}, benchStartsOption(tb))
	if err != nil {
		tb.Fatal(err)
	}
	cl := srv.GetClient()
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return kindsController(mgr, w.kinds, reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
			name, _ := known.ClusterFrom(ctx)
			return w.reconcile(ctx, cl, name, req)
		}), w.forOpts...)
	})
	return &mccrEngine{srv: srv, stopFunc: test.Run(tb, srv)}
}

func (e *mccrEngine) register(nc *config.NamedConfig) error { return e.srv.Add(nc) }

func (e *mccrEngine) failures() (n int, notes []string) {
	for _, st := range e.srv.Statuses() {
		if st.Failures > 0 {
			n += st.Failures
			notes = append(notes, fmt.Sprintf("%s failed %d times: %v", st.Name, st.Failures, st.LastError))
		}
	}
	return n, notes
}

func (e *mccrEngine) stop() error { return e.stopFunc() }

// plainEngine is what mccr starts from: ctrl.NewManager per cluster, with
// metrics, probes and leader election off, each with the controller.
type plainEngine struct {
	ns  string
	w   controllerWork
	ctx context.Context
	end context.CancelFunc
	wg  sync.WaitGroup

	mu   sync.Mutex
	errs []error
}

func startPlain(ns string, w controllerWork) *plainEngine {
	ctx, end := context.WithCancel(context.Background())
	return &plainEngine{ns: ns, w: w, ctx: ctx, end: end}
}

func (e *plainEngine) register(nc *config.NamedConfig) error {
	mgr, err := ctrl.NewManager(nc.Config, ctrl.Options{
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOptions(e.ns),
		// The same controller in every Manager of the process.
		Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	cl, name := mgr.GetClient(), nc.Name
	err = kindsController(mgr, e.w.kinds, reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
		return e.w.reconcile(ctx, cl, name, req)
	}), e.w.forOpts...)
	if err != nil {
		return err
	}
	e.wg.Go(func() {
		if err := mgr.Start(e.ctx); err != nil {
			e.mu.Lock()
			e.errs = append(e.errs, fmt.Errorf("%s: %w", name, err))
			e.mu.Unlock()
		}
	})
	return nil
}

func (e *plainEngine) failures() (n int, notes []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, err := range e.errs {
		notes = append(notes, err.Error())
	}
	return len(e.errs), notes
}

// checkFailures fails tb if an engine's clusters failed, saying how.
func checkFailures(tb testing.TB, n int, notes []string) {
	tb.Helper()
	if n > 0 {
		tb.Errorf("%d cluster failures: %s", n, strings.Join(notes, "; "))
	}
}

func (e *plainEngine) stop() error {
	e.end()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(2 * time.Minute):
		return errors.New("plain Managers did not stop within 2m")
	}
}

// startEngine starts an engine by name (engineMCCR or enginePlain) with
// the workload w, its cache on namespace ns; host is an mccr Server's host
// cluster.
func startEngine(tb testing.TB, name string, host *rest.Config, ns string, w controllerWork) engine {
	tb.Helper()
	switch name {
	case engineMCCR:
		return startMCCR(tb, host, ns, w)
	case enginePlain:
		return startPlain(ns, w)
	}
	tb.Fatalf("no engine %q", name)
	return nil
}

// scale is one scale run.
type scale struct {
	Engine   string // engineMCCR or enginePlain
	Clusters int    // registered at once
	Objects  int    // ConfigMaps each cluster reconciles
	// More clusters are then registered one at a time, each once the one
	// before has reconciled, with the whole fleet running.
	More     int
	Distinct bool // each cluster behind an endpoint of its own
	// Kinds the controller watches: ConfigMaps, and Kinds-1 kinds they own
	// (kinds_test.go). Zero is one.
	Kinds int
	// Proxied puts every cluster behind a test.FaultProxy of its own, in
	// the run's process, that adds AddedRTT to each round trip
	// (latency_bench_test.go).
	Proxied  bool
	AddedRTT time.Duration
}

// kinds is how many kinds the run's controller watches.
func (s scale) kinds() int { return max(s.Kinds, 1) }

// scaleFigures are what a scale run measured. Per-cluster figures are of
// idle clusters that have reconciled everything, after garbage collection.
type scaleFigures struct {
	AllReconciled      time.Duration // from the first register until every object of every cluster reconciled
	RSSKiB, HeapKiB    float64       // per cluster: RSS and Go heap in use
	StackKiB           float64       // per cluster: goroutine stacks in use
	Goroutines         float64       // per cluster
	FirstP50, FirstP99 time.Duration // register → first Reconcile of the More clusters
	MoreMiB            float64       // RSS growth per 100 clusters, from the More clusters
	Failures           int           // of the engine's clusters
	FailureNotes       []string      // what failed, a line per cluster
}

// scaleKubeconfigs returns one kubeconfig file for each of the run's
// clusters (Clusters+More of them): names behind endpoints of their own, or
// straight on the package's member API servers, in turn. Endpoints are
// removed when the test ends.
func scaleKubeconfigs(tb testing.TB, s scale) []string {
	tb.Helper()
	backends := make([]*test.Cluster, len(members))
	for i, m := range members {
		backends[i] = fleet.Cluster(m)
	}
	prefix := test.NamespaceName(tb)
	names := make([]string, s.Clusters+s.More)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	paths := make([]string, len(names))
	if !s.Distinct {
		dir := tb.TempDir()
		for i, n := range names {
			paths[i] = filepath.Join(dir, n+".kubeconfig")
			if err := test.WriteKubeconfig(paths[i], n, backends[i%len(backends)].Config); err != nil {
				tb.Fatal(err)
			}
		}
		return paths
	}
	for i, e := range test.NewEndpoints(tb, fleet, backends, names...) {
		paths[i] = e.KubeconfigPath
	}
	return paths
}

// measureScale runs s on configs, in namespace ns of the member API
// servers, which holds s.Objects ConfigMaps; host is the Server's host
// cluster. It measures the process it runs in: run it in a process of its
// own (runScale).
func measureScale(tb testing.TB, s scale, host *rest.Config, ns string, configs []*config.NamedConfig) scaleFigures {
	tb.Helper()
	t := newTally(s.Objects)
	e := startEngine(tb, s.Engine, host, ns, controllerWork{kinds: s.kinds(), reconcile: t.get})
	defer func() {
		if err := e.stop(); err != nil {
			tb.Error(err)
		}
	}()
	var fig scaleFigures
	endpoints := "shared"
	if s.Distinct {
		endpoints = "distinct"
	}
	label := fmt.Sprintf("%s-%d-%s-kinds-%d", s.Engine, s.Clusters, endpoints, s.kinds())
	before := readings(tb, label+"-before")
	stopCPUProfile := cpuProfile(tb, label+"-register")
	begin := time.Now()
	for _, nc := range configs[:s.Clusters] {
		if err := e.register(nc); err != nil {
			tb.Fatal(err)
		}
	}
	test.Eventually(tb, 10*time.Minute, "every cluster reconciled every object", func() bool { return t.completed() == s.Clusters })
	fig.AllReconciled = time.Since(begin)
	stopCPUProfile()

	idle := readings(tb, label+"-idle")
	n := float64(s.Clusters)
	fig.RSSKiB = float64(idle.rssKiB-before.rssKiB) / n
	fig.HeapKiB = float64(idle.heapBytes-before.heapBytes) / 1024 / n
	fig.StackKiB = float64(idle.stackBytes-before.stackBytes) / 1024 / n
	fig.Goroutines = float64(idle.goroutines-before.goroutines) / n

	if s.More > 0 {
		took := make([]time.Duration, 0, s.More)
		for _, nc := range configs[s.Clusters:] {
			registered := time.Now()
			if err := e.register(nc); err != nil {
				tb.Fatal(err)
			}
			select {
			case <-t.firstReconcile(nc.Name):
			case <-time.After(time.Minute):
				tb.Fatalf("%s: no Reconcile within a minute of registering it", nc.Name)
			}
			took = append(took, t.firstAt(nc.Name).Sub(registered))
		}
		slices.Sort(took)
		fig.FirstP50, fig.FirstP99 = percentile(took, 0.50), percentile(took, 0.99)
		test.Eventually(tb, time.Minute, "the clusters registered one at a time reconciled every object", func() bool {
			return t.completed() == s.Clusters+s.More
		})
		grown := readings(tb, label+"-more")
		fig.MoreMiB = float64(grown.rssKiB-idle.rssKiB) / 1024 / float64(s.More) * 100
	}
	fig.Failures, fig.FailureNotes = e.failures()
	return fig
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

type reading struct {
	rssKiB     int64
	heapBytes  int64
	stackBytes int64
	goroutines int
}

// profileDirEnv names a directory where scale runs write, at each reading,
// a heap profile, a goroutine dump and the runtime's memory statistics,
// named after the test, the run and the moment (before, idle, more), and a
// CPU profile from the first register until every object is reconciled
// (register): `go tool pprof -base <before> <idle>` shows what the clusters
// hold. A fake fleet's helpers each write a CPU profile of their whole run
// there too (fake-fleet-<first name>-<servers>.cpu.pb.gz): they share the
// cores with the engine.
const profileDirEnv = "MCCR_SCALE_PROFILE_DIR"

// readings lets the heap and goroutines come to rest and reads them, and
// writes profiles when profileDirEnv says where.
func readings(tb testing.TB, moment string) reading {
	tb.Helper()
	settle()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := reading{
		rssKiB:     rssKiB(),
		heapBytes:  int64(ms.HeapInuse),  //nolint:gosec // G115: a heap fits in int64
		stackBytes: int64(ms.StackInuse), //nolint:gosec // G115: so do stacks
		goroutines: runtime.NumGoroutine(),
	}
	if dir := os.Getenv(profileDirEnv); dir != "" {
		writeProfiles(tb, dir, moment)
	}
	return r
}

// cpuProfile profiles the CPU, when profileDirEnv says where, until the
// returned function is called.
func cpuProfile(tb testing.TB, moment string) (stop func()) {
	tb.Helper()
	dir := os.Getenv(profileDirEnv)
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(profilePath(tb, dir, moment) + ".cpu.pb.gz")
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		tb.Fatal(errors.Join(err, f.Close()))
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			tb.Error(err)
		}
	}
}

func profilePath(tb testing.TB, dir, moment string) string {
	return filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(tb.Name())+"-"+moment)
}

func writeProfiles(tb testing.TB, dir, moment string) {
	tb.Helper()
	base := profilePath(tb, dir, moment)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	raw, err := json.MarshalIndent(struct {
		RSSKiB int64
		runtime.MemStats
	}{rssKiB(), ms}, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(base+".memstats.json", raw, 0o600); err != nil {
		tb.Fatal(err)
	}
	for _, p := range []struct {
		profile, suffix string
		debug           int
	}{{"heap", ".heap.pb.gz", 0}, {"goroutine", ".goroutines.txt", 2}} {
		f, err := os.Create(base + p.suffix)
		if err != nil {
			tb.Fatal(err)
		}
		err = errors.Join(pprof.Lookup(p.profile).WriteTo(f, p.debug), f.Close())
		if err != nil {
			tb.Fatal(err)
		}
	}
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

// A Server with 20 clusters, each behind an endpoint of its own: every
// cluster reaches its API server through its own endpoint, and what an
// idle cluster holds stays within generous bounds (the benchmarks measure
// it; this catches a cluster that suddenly costs several times as much).
// It runs the benchmarks' harness, a child process included.
func TestFleetOfDistinctEndpoints(t *testing.T) {
	const (
		maxGoroutines = 15      // per cluster; 13 measured
		maxHeapKiB    = 4 << 10 // per cluster; <1 MiB measured
	)
	s := scale{Engine: engineMCCR, Clusters: 20, Objects: 10, More: 3, Distinct: true}
	ns := namespace(t, test.NamespaceName(t))
	for _, m := range members {
		configMaps(t, m, ns, s.Objects)
	}
	kubeconfigs := scaleKubeconfigs(t, s)
	fig := runScale(t, s, ns, kubeconfigs)
	checkFailures(t, fig.Failures, fig.FailureNotes)
	t.Logf("figure: per idle cluster behind its own endpoint: %.1f goroutines, %.0f KiB heap, %.0f KiB RSS; %d clusters reconciled in %s",
		fig.Goroutines, fig.HeapKiB, fig.RSSKiB, s.Clusters, fig.AllReconciled.Round(time.Millisecond))
	if fig.Goroutines > maxGoroutines {
		t.Errorf("%.1f goroutines per idle cluster, want at most %d", fig.Goroutines, maxGoroutines)
	}
	if fig.HeapKiB > maxHeapKiB {
		t.Errorf("%.0f KiB of heap per idle cluster, want at most %d", fig.HeapKiB, maxHeapKiB)
	}
	for _, e := range fleet.Endpoints() {
		if !slices.Contains(kubeconfigs, e.KubeconfigPath) {
			continue
		}
		if accepted, _, err := e.Connections(); err != nil || accepted == 0 {
			t.Errorf("endpoint %s accepted %d connections (%v): its cluster did not come through it", e.Name, accepted, err)
		}
	}
}
