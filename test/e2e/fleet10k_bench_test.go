package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// BenchmarkFakeFleet is one replica with a fleet of thousands of clusters:
// fake API servers (internal/fakeapi), each on a loopback port of its own
// and reached through a connection and transport of its own, served by
// helper processes (fakefleet_test.go), and an mccr Server in a process of
// its own (the engine: this test binary again, running only
// TestFleetEngineChild), whose one controller Gets each of the 10
// ConfigMaps of a namespace in every cluster. The fake servers answer in
// microseconds, so what the figures show is the engine: what it costs per
// cluster, and what in it grows with the fleet.
//
// Per run it reports:
//   - s-all-reconciled: from the first Add until every cluster reconciled
//     every object; MiB-rss: the engine's RSS then, at rest (after garbage
//     collection), and MiB-rss-peak its highest; KiB-rss/cluster and
//     goroutines/cluster, at rest, over what the engine held before.
//   - ms-p99-add-to-reconcile and ms-p99-delete: one more cluster added,
//     its first Reconcile awaited, then deleted (Delete returns once its
//     Manager has stopped), one at a time, ~100 times with the whole fleet
//     running; -burst: the same once the fleet is registered, while it
//     starts (as many as fit in the burst, up to 200: n-burst-cycles;
//     with fewer than 100 the p99 is the slowest).
//   - ms-add-to-reconcile-amid-registration: one more cluster added
//     halfway through the fleet's Adds. The Server cannot tell it from
//     the fleet registered at once, and it waits its turn: the newest of
//     the waiting starts start first, and every fourth slot goes to the
//     oldest, so one added amid thousands waits for most of them.
//   - µs-status, µs-statuses, µs-clusternames: median (and -max) of 100
//     calls of Server.Status, Statuses and ClusterNames, fleet at rest
//     (Statuses' first calls since the reading at rest returned the
//     heap's free memory to the system, so the kernel faults its results'
//     pages in); µs-statuses-again: 100 more calls of Statuses after a
//     collection, which find the memory the first results held;
//     µs-appendstatuses-reused: the same of AppendStatuses given the
//     buffer of its last call, as a poller calls it;
//     µs-cpu-…: the median CPU time of the same calls (what they cost,
//     however busy the machine).
//   - ms-fleetz: median (and -max) of 5 GETs of the fleet page (HTML).
//   - s-cpu-engine and s-cpu-fakes: CPU time the engine and the fake
//     servers' helpers used over the run, and load-1m, the machine's load
//     average as the run began: the two cores are shared;
//     cores-engine-at-rest: the engine's CPU over 10 s with the fleet at
//     rest (reachability probes, mostly).
func BenchmarkFakeFleet(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			// Up to 200 cycles during the burst, so that its p99 is not
			// merely its slowest; one more name for the cluster added amid
			// the registration.
			const burstCycles = 200
			spec := fleetEngineSpec{Namespace: "fleet", Objects: 10, Cycles: 100, Calls: 100, FleetzGets: 5}
			names := make([]string, 0, n+burstCycles+1+spec.Cycles+1)
			for i := range n {
				names = append(names, fmt.Sprintf("fleet-%05d", i))
			}
			for i := range burstCycles + 1 {
				names = append(names, fmt.Sprintf("burst-%03d", i))
			}
			for i := range spec.Cycles {
				names = append(names, fmt.Sprintf("after-%03d", i))
			}
			names = append(names, "host")
			begin := time.Now()
			ff := startFakeFleet(b, names, spec.Namespace, spec.Objects)
			b.Logf("fake fleet: %d servers in %d helper processes, started in %s, %.0f MiB RSS",
				len(ff.Clusters), len(ff.helpers), time.Since(begin).Round(time.Millisecond), ff.rssMiB())
			spec.CAs = ff.CAs
			for _, c := range ff.Clusters {
				switch {
				case c.Name == "host":
					spec.Host = c
				case strings.HasPrefix(c.Name, "burst-"):
					spec.Burst = append(spec.Burst, c)
				case strings.HasPrefix(c.Name, "after-"):
					spec.After = append(spec.After, c)
				default:
					spec.Clusters = append(spec.Clusters, c)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				load := loadAverage()
				fakesCPU := ff.cpuSeconds()
				fig := runFleetEngine(b, spec)
				fakesCPU = ff.cpuSeconds() - fakesCPU
				b.ReportMetric(fig.AllReconciled.Seconds(), "s-all-reconciled")
				b.ReportMetric(fig.RSSMiB, "MiB-rss")
				b.ReportMetric(fig.PeakRSSMiB, "MiB-rss-peak")
				b.ReportMetric(fig.RSSKiB, "KiB-rss/cluster")
				b.ReportMetric(fig.Goroutines, "goroutines/cluster")
				b.ReportMetric(ms(fig.Add.P99), "ms-p99-add-to-reconcile")
				b.ReportMetric(ms(fig.Add.P50), "ms-p50-add-to-reconcile")
				b.ReportMetric(ms(fig.Delete.P99), "ms-p99-delete")
				b.ReportMetric(ms(fig.Delete.P50), "ms-p50-delete")
				b.ReportMetric(ms(fig.BurstAdd.P99), "ms-p99-add-to-reconcile-burst")
				b.ReportMetric(ms(fig.BurstDelete.P99), "ms-p99-delete-burst")
				b.ReportMetric(ms(fig.BurstAdd.Max), "ms-max-add-to-reconcile-burst")
				b.ReportMetric(ms(fig.BurstDelete.Max), "ms-max-delete-burst")
				b.ReportMetric(float64(fig.BurstAdd.N), "n-burst-cycles")
				b.ReportMetric(ms(fig.AmidAdd), "ms-add-to-reconcile-amid-registration")
				b.ReportMetric(micros(fig.Status.P50), "µs-status")
				b.ReportMetric(micros(fig.Status.Max), "µs-status-max")
				b.ReportMetric(micros(fig.Statuses.P50), "µs-statuses")
				b.ReportMetric(micros(fig.Statuses.Max), "µs-statuses-max")
				b.ReportMetric(micros(fig.StatusesAgain.P50), "µs-statuses-again")
				b.ReportMetric(micros(fig.StatusesAgain.Max), "µs-statuses-again-max")
				b.ReportMetric(micros(fig.StatusesAgainCPU.P50), "µs-cpu-statuses-again")
				b.ReportMetric(micros(fig.AppendStatuses.P50), "µs-appendstatuses-reused")
				b.ReportMetric(micros(fig.AppendStatuses.Max), "µs-appendstatuses-reused-max")
				b.ReportMetric(micros(fig.ClusterNames.P50), "µs-clusternames")
				b.ReportMetric(micros(fig.ClusterNames.Max), "µs-clusternames-max")
				b.ReportMetric(micros(fig.StatusCPU.P50), "µs-cpu-status")
				b.ReportMetric(micros(fig.StatusesCPU.P50), "µs-cpu-statuses")
				b.ReportMetric(micros(fig.ClusterNamesCPU.P50), "µs-cpu-clusternames")
				b.ReportMetric(ms(fig.Fleetz.P50), "ms-fleetz")
				b.ReportMetric(ms(fig.Fleetz.Max), "ms-fleetz-max")
				b.ReportMetric(fig.CPU.Seconds(), "s-cpu-engine")
				b.ReportMetric(fig.RestCores, "cores-engine-at-rest")
				b.ReportMetric(fakesCPU, "s-cpu-fakes")
				b.ReportMetric(load, "load-1m")
				b.Logf("clusters=%d: all reconciled in %s (Adds took %s; engine CPU in the burst %s), RSS %.0f MiB at rest (peak %.0f MiB), %.0f KiB and %.1f goroutines per cluster; "+
					"add→reconcile p50/p99/max %s/%s/%s, delete %s/%s/%s; during the burst (%d cycles) add→reconcile %s/%s/%s, delete %s/%s/%s; one added amid the registration: %s; "+
					"Status %s (max %s, CPU %s), Statuses %s (max %s, CPU %s), again %s (max %s, CPU %s), AppendStatuses with its last buffer %s (max %s), ClusterNames %s (max %s, CPU %s); /fleetz %s (max %s, %d KiB); "+
					"engine stopped in %s; CPU engine %.1f s (at rest %.2f cores), fakes %.1f s; load %.2f before, %.2f after; fake fleet RSS %.0f MiB",
					len(spec.Clusters), fig.AllReconciled.Round(time.Millisecond), fig.Registered.Round(time.Millisecond), fig.BurstCPU.Round(time.Millisecond),
					fig.RSSMiB, fig.PeakRSSMiB, fig.RSSKiB, fig.Goroutines,
					fig.Add.P50, fig.Add.P99, fig.Add.Max, fig.Delete.P50, fig.Delete.P99, fig.Delete.Max,
					fig.BurstAdd.N, fig.BurstAdd.P50, fig.BurstAdd.P99, fig.BurstAdd.Max, fig.BurstDelete.P50, fig.BurstDelete.P99, fig.BurstDelete.Max, fig.AmidAdd.Round(time.Millisecond),
					fig.Status.P50, fig.Status.Max, fig.StatusCPU.P50, fig.Statuses.P50, fig.Statuses.Max, fig.StatusesCPU.P50,
					fig.StatusesAgain.P50, fig.StatusesAgain.Max, fig.StatusesAgainCPU.P50,
					fig.AppendStatuses.P50, fig.AppendStatuses.Max,
					fig.ClusterNames.P50, fig.ClusterNames.Max, fig.ClusterNamesCPU.P50,
					fig.Fleetz.P50, fig.Fleetz.Max, fig.FleetzBytes>>10,
					fig.Stop.Round(time.Millisecond), fig.CPU.Seconds(), fig.RestCores, fakesCPU, load, loadAverage(), ff.rssMiB())
				// A start that fails during the burst (its reachability check
				// starved of CPU) is retried, and every cluster has reconciled
				// by now: a figure of the run, not a failure of the benchmark.
				b.ReportMetric(float64(fig.Failures), "n-failed-starts")
				if fig.Failures > 0 {
					b.Logf("%d cluster starts failed and were retried", fig.Failures)
				}
			}
		})
	}
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// fleetEngineEnv names the file holding an engine child's fleetEngineSpec.
const fleetEngineEnv = "MCCR_E2E_FLEET_ENGINE"

// maxStartsEnv, when set, is the engines' Options.MaxConcurrentStarts in
// the fleet benchmarks (the default's bound against none, say: -1).
const maxStartsEnv = "MCCR_BENCH_MAX_STARTS"

// benchStartsOption sets Options.MaxConcurrentStarts from maxStartsEnv,
// when it is set.
func benchStartsOption(tb testing.TB) server.Option {
	return func(o *server.Options) {
		v := os.Getenv(maxStartsEnv)
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			tb.Fatalf("%s: %v", maxStartsEnv, err)
		}
		o.MaxConcurrentStarts = n
	}
}

// isFleetEngineChild tells TestMain that this process is a fake fleet's
// engine: it starts no fleet of its own.
func isFleetEngineChild() bool { return os.Getenv(fleetEngineEnv) != "" }

// fleetEngineSpec is what an engine child runs, and where it writes its
// figures.
type fleetEngineSpec struct {
	CAs       [][]byte
	Host      fakeCluster   // the host Manager's cluster
	Clusters  []fakeCluster // registered at once
	Burst     []fakeCluster // added and deleted one at a time during the burst
	After     []fakeCluster // then once every cluster reconciled
	Namespace string
	Objects   int
	Cycles    int // add/delete cycles after the burst (during it: as many as Burst has, less one)
	Calls     int // of Status, Statuses, ClusterNames
	// FleetzGets is how many times the fleet page is read.
	FleetzGets int
	Figures    string
}

func (s *fleetEngineSpec) fleet() *fakeFleet { return &fakeFleet{CAs: s.CAs} }

// spread is what a series of timings came to.
type spread struct {
	N             int
	P50, P99, Max time.Duration
}

func spreadOf(d []time.Duration) spread {
	if len(d) == 0 {
		return spread{}
	}
	d = slices.Sorted(slices.Values(d))
	return spread{N: len(d), P50: percentile(d, 0.50), P99: percentile(d, 0.99), Max: d[len(d)-1]}
}

// fleetFigures are what an engine child measured.
type fleetFigures struct {
	Registered, AllReconciled time.Duration
	BurstCPU                  time.Duration // the engine's CPU time during the burst
	RSSMiB, PeakRSSMiB        float64
	RSSKiB, Goroutines        float64 // per cluster, at rest
	BurstAdd, BurstDelete     spread
	// AmidAdd is add→reconcile of the cluster added amid the fleet's
	// registration.
	AmidAdd          time.Duration
	Add, Delete      spread
	Status, Statuses spread
	// StatusesAgain is a second series of Statuses calls, once the first
	// series' results were collected.
	StatusesAgain  spread
	AppendStatuses spread // with the buffer of its last call
	ClusterNames   spread
	// The same calls' CPU time (their thread's): what they cost whatever
	// else the two cores were doing meanwhile.
	StatusCPU, StatusesCPU, StatusesAgainCPU, ClusterNamesCPU spread
	Fleetz                                                    spread
	FleetzBytes                                               int
	Stop                                                      time.Duration
	CPU                                                       time.Duration // the engine's whole run, from its rusage
	RestCores                                                 float64       // the engine's CPU at rest, in cores
	Failures                                                  int
}

// runFleetEngine runs spec in a child process and returns what it
// measured.
func runFleetEngine(tb testing.TB, spec fleetEngineSpec) fleetFigures {
	tb.Helper()
	dir := tb.TempDir()
	spec.Figures = filepath.Join(dir, "figures.json")
	raw, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	specPath := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(specPath, raw, 0o600); err != nil {
		tb.Fatal(err)
	}
	args := []string{"-test.run=^TestFleetEngineChild$", "-test.v", "-test.timeout=30m"}
	if os.Getenv(profileDirEnv) != "" {
		args = append(args, "-test.memprofilerate="+cmp.Or(os.Getenv("MCCR_SCALE_MEMPROFILERATE"), "4096"))
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), fleetEngineEnv+"="+specPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("fleet engine in a child process: %v\n%s", err, out.Bytes())
	}
	if raw, err = os.ReadFile(spec.Figures); err != nil {
		tb.Fatalf("fleet engine wrote no figures: %v\n%s", err, out.Bytes())
	}
	var fig fleetFigures
	if err := json.Unmarshal(raw, &fig); err != nil {
		tb.Fatal(err)
	}
	fig.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if testing.Verbose() {
		tb.Logf("fleet engine:\n%s", out.Bytes())
	}
	return fig
}

// TestFleetEngineChild is not a test but BenchmarkFakeFleet's engine, in a
// process of its own: runFleetEngine starts this binary with
// -test.run=^TestFleetEngineChild$ and the spec in its environment. In any
// other process it returns at once.
func TestFleetEngineChild(t *testing.T) {
	if !isFleetEngineChild() {
		return
	}
	spec := readChildSpec[fleetEngineSpec](t, fleetEngineEnv)
	writeChildFigures(t, spec.Figures, measureFleet(t, &spec))
}

// measureFleet runs spec in this process and measures it.
func measureFleet(t *testing.T, spec *fleetEngineSpec) fleetFigures {
	ff := spec.fleet()
	fleet, cycles := newTally(spec.Objects), newTally(spec.Objects)
	addr := test.FreeAddress(t)
	errs := &errorTally{counts: map[string]int{}}
	srv, err := server.NewServer(ff.config(spec.Host).Config, ctrl.Options{
		Logger:                 logr.New(errs),
		Metrics:                metricsserver.Options{BindAddress: addr},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOptions(spec.Namespace),
	}, func(o *server.Options) { o.FleetPage = true }, benchStartsOption(t))
	if err != nil {
		t.Fatal(err)
	}
	cl := srv.GetClient()
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("fleet").For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				name, _ := known.ClusterFrom(ctx)
				if strings.HasPrefix(name, "fleet-") {
					return fleet.get(ctx, cl, name, req)
				}
				res, err := cycles.get(ctx, cl, name, req)
				if errors.Is(err, server.ErrClusterNotFound) {
					err = nil // deleted meanwhile: the cycle goes on
				}
				return res, err
			}))
	})
	stop := test.Background(srv)
	fleetz := "http://" + addr + "/fleetz"
	test.Eventually(t, time.Minute, "the host Manager serves the fleet page", func() bool {
		_, _, err := get(fleetz)
		return err == nil
	})
	var fig fleetFigures
	label := fmt.Sprintf("fleet-%d", len(spec.Clusters))

	// A cluster added, reconciled and deleted: add returns once the Add
	// has, and finish waits for its first Reconcile, then deletes it.
	add := func(c fakeCluster) (finish func(adds, deletes *[]time.Duration)) {
		registered := time.Now()
		if err := srv.Add(ff.config(c)); err != nil {
			t.Error(err)
			return func(_, _ *[]time.Duration) {}
		}
		return func(adds, deletes *[]time.Duration) {
			select {
			case <-cycles.firstReconcile(c.Name):
			case <-time.After(2 * time.Minute):
				t.Errorf("%s: no Reconcile within 2m of its Add", c.Name)
				return
			}
			*adds = append(*adds, cycles.firstAt(c.Name).Sub(registered))
			begin := time.Now()
			if err := srv.Delete(c.Name); err != nil {
				t.Error(err)
				return
			}
			*deletes = append(*deletes, time.Since(begin))
		}
	}
	// One at a time.
	cycle := func(c fakeCluster, adds, deletes *[]time.Duration) { add(c)(adds, deletes) }

	before := readings(t, label+"-before")
	stopCPUProfile := cpuProfile(t, label+"-register")
	cpuBefore := cpuTime()
	begin := time.Now()
	registered, burstDone := make(chan struct{}), make(chan struct{})
	var (
		burstAdds, burstDeletes []time.Duration
		amid                    []time.Duration
		prober                  sync.WaitGroup
	)
	// One more cluster, once the fleet is registered, while it starts;
	// then another, and so on.
	prober.Go(func() {
		<-registered
		for _, c := range spec.Burst[min(1, len(spec.Burst)):] {
			select {
			case <-burstDone:
				return
			default:
			}
			cycle(c, &burstAdds, &burstDeletes)
		}
	})
	for i, c := range spec.Clusters {
		if i == len(spec.Clusters)/2 && len(spec.Burst) > 0 {
			// One added amid the registration: as the Server sees it,
			// one of the fleet registered at once, which waits its turn.
			// Added here, between two of the fleet's Adds (from a
			// goroutine of its own, it could come after all of them).
			finish := add(spec.Burst[0])
			prober.Go(func() { finish(&amid, new([]time.Duration)) })
		}
		if err := srv.Add(ff.config(c)); err != nil {
			t.Fatal(err)
		}
	}
	fig.Registered = time.Since(begin)
	close(registered)
	test.Eventually(t, 10*time.Minute, "every cluster reconciled every object", func() bool {
		return fleet.completed() == len(spec.Clusters)
	})
	fig.AllReconciled = time.Since(begin)
	fig.BurstCPU = cpuTime() - cpuBefore
	close(burstDone)
	prober.Wait()
	stopCPUProfile()
	fig.BurstAdd, fig.BurstDelete = spreadOf(burstAdds), spreadOf(burstDeletes)
	if len(amid) > 0 {
		fig.AmidAdd = amid[0]
	}

	fig.PeakRSSMiB = float64(statusKiB("/proc/self/status", "VmHWM:")) / 1024
	idle := readings(t, label+"-idle")
	n := float64(len(spec.Clusters))
	fig.RSSMiB = float64(idle.rssKiB) / 1024
	fig.RSSKiB = float64(idle.rssKiB-before.rssKiB) / n
	fig.Goroutines = float64(idle.goroutines-before.goroutines) / n

	// What the fleet costs at rest: probes, resyncs, timers.
	stopCPUProfile = cpuProfile(t, label+"-rest")
	restBegin, restCPU := time.Now(), cpuTime()
	time.Sleep(fleetRestWindow)
	fig.RestCores = (cpuTime() - restCPU).Seconds() / time.Since(restBegin).Seconds()
	stopCPUProfile()

	var adds, deletes []time.Duration
	stopCPUProfile = cpuProfile(t, label+"-cycles")
	for _, c := range spec.After[:min(spec.Cycles, len(spec.After))] {
		cycle(c, &adds, &deletes)
	}
	stopCPUProfile()
	fig.Add, fig.Delete = spreadOf(adds), spreadOf(deletes)

	stopCPUProfile = cpuProfile(t, label+"-calls")
	fig.Status, fig.StatusCPU = timeCalls(spec.Calls, func(i int) {
		name := spec.Clusters[i*len(spec.Clusters)/spec.Calls].Name
		if _, err := srv.Status(name); err != nil {
			t.Error(err)
		}
	})
	statuses := func(int) {
		if got := len(srv.Statuses()); got != len(spec.Clusters) {
			t.Errorf("Statuses: %d clusters, want %d", got, len(spec.Clusters))
		}
	}
	// The first calls since the reading at rest gave the heap's free
	// memory back to the system: each result's pages are faulted in
	// afresh. The second series, after a collection, finds the memory of
	// the first series' results in the heap, as calls now and then in a
	// process that has run a while do.
	fig.Statuses, fig.StatusesCPU = timeCalls(spec.Calls, statuses)
	fig.StatusesAgain, fig.StatusesAgainCPU = timeCalls(spec.Calls, statuses)
	var buf []server.ClusterStatus
	fig.AppendStatuses, _ = timeCalls(spec.Calls, func(int) {
		if buf = srv.AppendStatuses(buf[:0]); len(buf) != len(spec.Clusters) {
			t.Errorf("AppendStatuses: %d clusters, want %d", len(buf), len(spec.Clusters))
		}
	})
	fig.ClusterNames, fig.ClusterNamesCPU = timeCalls(spec.Calls, func(int) {
		if got := len(srv.ClusterNames()); got != len(spec.Clusters) {
			t.Errorf("ClusterNames: %d clusters, want %d", got, len(spec.Clusters))
		}
	})
	stopCPUProfile()
	fig.Fleetz, _ = timeCalls(spec.FleetzGets, func(int) {
		code, size, err := get(fleetz)
		if err != nil || code != http.StatusOK {
			t.Errorf("GET %s: %d, %v", fleetz, code, err)
		}
		fig.FleetzBytes = size
	})

	var failed []string
	for _, st := range srv.Statuses() {
		if st.Failures > 0 {
			fig.Failures += st.Failures
			failed = append(failed, st.Name)
		}
	}
	if len(failed) > 0 {
		t.Logf("%d clusters failed, %d times in all: %s", len(failed), fig.Failures, strings.Join(failed[:min(len(failed), 10)], ", "))
	}
	errs.log(t)
	begin = time.Now()
	if err := stop(); err != nil {
		t.Error(err)
	}
	fig.Stop = time.Since(begin)
	return fig
}

// errorTally is the engine's logger: it counts the error lines, by message
// and error, and drops the rest (formatting a line per cluster would be
// part of what is measured).
type errorTally struct {
	mu     sync.Mutex
	counts map[string]int
}

var _ logr.LogSink = &errorTally{}

func (e *errorTally) Init(logr.RuntimeInfo)          {}
func (e *errorTally) Enabled(int) bool               { return false }
func (e *errorTally) Info(int, string, ...any)       {}
func (e *errorTally) WithValues(...any) logr.LogSink { return e }
func (e *errorTally) WithName(string) logr.LogSink   { return e }
func (e *errorTally) Error(err error, msg string, _ ...any) {
	line := msg
	if err != nil {
		line += ": " + err.Error()
	}
	// One line per kind of error, not per cluster or host.
	line = fakeClusterURL.ReplaceAllString(line, "<fake cluster>")
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counts[line]++
}

var fakeClusterURL = regexp.MustCompile(`https://127\.0\.0\.1:\d+|\b(fleet|burst|after)-\d+\b`)

// log writes the error lines, the most frequent first.
func (e *errorTally) log(t *testing.T) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lines := slices.SortedFunc(maps.Keys(e.counts), func(a, b string) int { return cmp.Compare(e.counts[b], e.counts[a]) })
	for _, l := range lines[:min(len(lines), 20)] {
		t.Logf("engine logged %d times: %s", e.counts[l], l)
	}
}

// fleetRestWindow is how long the engine's CPU is measured at rest.
const fleetRestWindow = 10 * time.Second

// timeCalls times n calls of fn (given 0…n-1): how long each took, and
// how much CPU time it used (its thread's, with the goroutine locked to
// it, so that time spent waiting for a core on a busy machine does not
// count).
func timeCalls(n int, fn func(i int)) (wall, cpu spread) {
	// Not within a garbage collection that something else started: at
	// 10,000 clusters one takes seconds, and every allocation meanwhile
	// pays for some of its marking.
	runtime.GC()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	took, used := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		begin, cpuBegin := time.Now(), test.ThreadCPUTime()
		fn(i)
		took[i], used[i] = time.Since(begin), test.ThreadCPUTime()-cpuBegin
	}
	return spreadOf(took), spreadOf(used)
}

// get reads url to its end.
func get(url string) (code, size int, err error) {
	c := http.Client{Timeout: time.Minute}
	resp, err := c.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, int(n), err
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// statusKiB reads a "Vm…:" line of a /proc/<pid>/status file, in KiB (0 if
// there is none).
func statusKiB(path, key string) int64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// loadAverage is the machine's load average over the last minute.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// cpuSeconds is the CPU time the helpers used so far (user and system,
// /proc/<pid>/stat).
func (f *fakeFleet) cpuSeconds() float64 {
	var ticks int64
	for _, cmd := range f.helpers {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil {
			continue
		}
		// The command may hold spaces: fields count from after its ")".
		s := string(raw)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 12 {
			u, _ := strconv.ParseInt(fields[11], 10, 64)
			k, _ := strconv.ParseInt(fields[12], 10, 64)
			ticks += u + k
		}
	}
	return float64(ticks) / 100 // USER_HZ
}
