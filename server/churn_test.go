package server_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
)

// witness counts the Managers running per cluster name: a runnable added by
// a setup counts itself in when it starts and out when it returns, and a
// Manager has stopped only once its runnables have returned. It records
// any instant at which a name had two.
type witness struct {
	mu      sync.Mutex
	live    map[string]int
	starts  int
	doubles []string
}

func newWitness() *witness { return &witness{live: map[string]int{}} }

func (w *witness) setup(mgr ctrl.Manager) error {
	return mgr.Add(witnessRunnable{w})
}

type witnessRunnable struct{ w *witness }

func (r witnessRunnable) Start(ctx context.Context) error {
	name, _ := known.ClusterFrom(ctx)
	r.w.mu.Lock()
	r.w.live[name]++
	r.w.starts++
	if n := r.w.live[name]; n > 1 {
		r.w.doubles = append(r.w.doubles, fmt.Sprintf("%s: %d Managers at %s", name, n, time.Now().Format(time.StampMilli)))
	}
	r.w.mu.Unlock()
	<-ctx.Done()
	r.w.mu.Lock()
	r.w.live[name]--
	r.w.mu.Unlock()
	return nil
}

func (w *witness) check(t testing.TB) (total, starts int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.doubles) > 0 {
		t.Fatalf("two Managers for one cluster name: %v", w.doubles)
	}
	for _, n := range w.live {
		total += n
	}
	return total, w.starts
}

// fakeFleet is a few fake API servers, each a distinct endpoint.
type fakeFleet []*fakeapi.Server

func startFakes(t testing.TB, n int) fakeFleet {
	t.Helper()
	f := make(fakeFleet, 0, n)
	for i := range n {
		s := fakeapi.New()
		s.Seed(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d", i)}})
		s.Start()
		f = append(f, s)
	}
	return f
}

func (f fakeFleet) close() {
	for _, s := range f {
		s.Close()
	}
}

// variant is the v-th config of a cluster name: which fake server, and a
// user agent that makes configs of one server differ in content.
func (f fakeFleet) variant(name string, v int) *config.NamedConfig {
	cfg := f[v%len(f)].Config()
	cfg.UserAgent = fmt.Sprintf("mccr-churn/%d", v/len(f)%2)
	return config.NewNamedConfig(name, cfg)
}

// opBounds: how long each kind of call may take. Add, Status and Statuses
// never wait; Update and Delete wait at most StopTimeout.
type opStats struct {
	mu    sync.Mutex
	count map[string]int
	max   map[string]time.Duration
}

func (s *opStats) record(op string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count[op]++
	s.max[op] = max(s.max[op], d)
}

func (s *opStats) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.count {
		n += c
	}
	return n
}

// TestChurnKeepsOneManagerPerName drives Add, Update, Delete, Status and
// AddReconcilerSetup of a few names from several goroutines against fake API
// servers: before Start, while running, and after the Server lost its run
// (Start's ctx ended, as on leadership loss) — with setups that take time.
// Throughout, every call returns within its bound and no name ever has two
// Managers; afterwards no goroutine of the Server is left and the heap is
// back where it started.
func TestChurnKeepsOneManagerPerName(t *testing.T) {
	ops := 20000
	if testing.Short() {
		ops = 2000
	}
	fakes := startFakes(t, 4) // a host and three members' endpoints
	defer fakes.close()
	host, members := fakes[0], fakes[1:]
	churnTest(t, host.Config(), members.variant, ops, func() {
		fakes.close()
	})
}

// TestChurnOnRealAPIServers is the same churn against real API servers:
// every Manager that starts lists and watches a real kube-apiserver.
func TestChurnOnRealAPIServers(t *testing.T) {
	ops := 1040 // 1,000 and more once split among the workers
	if testing.Short() {
		ops = 200
	}
	variant := func(name string, v int) *config.NamedConfig {
		cfg := rest.CopyConfig(fleet.Cluster(members[v%len(members)]).Config)
		cfg.UserAgent = fmt.Sprintf("mccr-churn/%d", v/len(members)%2)
		return config.NewNamedConfig(name, cfg)
	}
	churnTest(t, fleet.Cluster("host").Config, variant, ops, fleet.CloseConnections)
}

// churnTest runs the churn: ops calls before Start, while running, and
// while and after the run ends. release lets go of what the test holds
// outside the Server (connections of its fleet) before the leak check.
func churnTest(t *testing.T, hostCfg *rest.Config, variant func(name string, v int) *config.NamedConfig, ops int, release func()) {
	const (
		workers = 8
		names   = 10
	)
	ignore := goleak.IgnoreCurrent()
	heapBefore := heapInUse()
	goroutinesBefore := runtime.NumGoroutine()

	grace := 500 * time.Millisecond
	srv, err := server.NewServer(hostCfg, ctrl.Options{
		Logger:                  logr.Discard(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: &grace,
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{"default": {}}},
	}, func(o *server.Options) {
		o.Backoff.Duration = 10 * time.Millisecond
		o.Backoff.Cap = 100 * time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	w := newWitness()
	srv.AddReconcilerSetup(w.setup)
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("churn").For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				return reconcile.Result{}, nil
			}))
	})
	srv.AddReconcilerSetup(func(ctrl.Manager) error {
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // a setup that takes time
		return nil
	})
	stopTimeout := grace + 5*time.Second
	bound := map[string]time.Duration{
		"Add": 2 * time.Second, "Status": 2 * time.Second, "Statuses": 2 * time.Second, "AddReconcilerSetup": 2 * time.Second,
		"Update": stopTimeout + 2*time.Second, "Delete": stopTimeout + 2*time.Second,
	}
	stats := &opStats{count: map[string]int{}, max: map[string]time.Duration{}}
	var failed atomic.Bool
	call := func(op string, f func() error) {
		done := make(chan error, 1)
		begin := time.Now()
		go func() { done <- f() }()
		timer := time.NewTimer(bound[op])
		defer timer.Stop()
		select {
		case err := <-done:
			stats.record(op, time.Since(begin))
			// ErrServerStopped: a call of the last round came once Start
			// had returned.
			if err != nil && !errors.Is(err, server.ErrClusterNotFound) && !errors.Is(err, server.ErrClusterExists) && !errors.Is(err, server.ErrServerStopped) {
				t.Errorf("%s: unexpected error %v", op, err)
			}
		case <-timer.C:
			if failed.CompareAndSwap(false, true) {
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			}
			// A call that hangs cannot be waited for; end the test binary
			// with the goroutines printed above.
			panic(fmt.Sprintf("%s did not return within %s", op, bound[op]))
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	// churn makes n calls; phase, with seed, picks the random streams.
	churn := func(phase uint64, n int) {
		var wg sync.WaitGroup
		for g := range uint64(workers) {
			rng := rand.New(rand.NewPCG(seed+g, phase))
			wg.Go(func() {
				for range n / workers {
					name := fmt.Sprintf("c%d", rng.IntN(names))
					nc := variant(name, rng.IntN(6))
					// A pause now and then lets Managers get as far as
					// running, so that churn meets them in every phase.
					if rng.IntN(2) == 0 {
						time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
					}
					switch p := rng.IntN(100); {
					case p < 40:
						call("Add", func() error { return srv.Add(nc) })
					case p < 58:
						call("Update", func() error { return srv.Update(nc) })
					case p < 76:
						call("Delete", func() error { return srv.Delete(name) })
					case p < 97:
						call("Status", func() error { _, err := srv.Status(name); return err })
					case p < 99:
						call("Statuses", func() error { srv.Statuses(); return nil })
					default:
						call("AddReconcilerSetup", func() error {
							srv.AddReconcilerSetup(func(ctrl.Manager) error { return nil })
							return nil
						})
					}
				}
			})
		}
		wg.Wait()
		w.check(t)
	}

	begin := time.Now()
	churn(1, ops/10) // before Start: nothing runs yet
	ctx, cancel := context.WithCancel(context.Background())
	startDone := make(chan error, 1)
	go func() { startDone <- srv.Start(ctx) }()
	churn(2, ops*8/10)
	// The run ends while calls keep coming (as when the host loses its
	// lease): Start returns only once every member has stopped.
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		churn(3, ops/10)
	}()
	cancel()
	select {
	case err := <-startDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(stopTimeout + 10*time.Second):
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		t.Fatal("Start did not return")
	}
	if live, _ := w.check(t); live != 0 {
		t.Fatalf("%d Managers still run after Start returned", live)
	}
	<-stopped
	took := time.Since(begin)
	if live, _ := w.check(t); live != 0 {
		t.Fatalf("%d Managers run after Start returned", live)
	}
	_, starts := w.check(t)
	t.Logf("figure: churn: %d operations (%v) from %d goroutines over %d names in %s; %d Managers started; max call: %v",
		stats.total(), stats.count, workers, names, took.Round(time.Millisecond), starts, stats.max)
	if starts == 0 {
		t.Fatal("no Manager ever started: the churn tested nothing")
	}

	release()
	leakcheck.VerifyNone(t, ignore)
	heapAfter := heapInUse()
	t.Logf("figure: churn: goroutines %d before, %d after; heap in use %s before, %s after",
		goroutinesBefore, runtime.NumGoroutine(), mib(heapBefore), mib(heapAfter))
	if heapAfter > heapBefore+8<<20 {
		t.Errorf("heap grew from %s to %s", mib(heapBefore), mib(heapAfter))
	}
}

// heapInUse is HeapInuse once the heap has come to rest.
func heapInUse() uint64 {
	for range 3 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
