package e2e

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/server"
)

// heapInUse is HeapInuse after the heap has come to rest.
func heapInUse() uint64 {
	settle()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// TestChurnAddDelete100 adds and deletes one cluster 100 times, each time
// waiting until it is Ready, while two other members reconcile a steady
// writer. Goroutines and heap must come back to where they were, nothing of
// the Server may be left once Start returns (goleak), and the steady
// members must not miss a write.
func TestChurnAddDelete100(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow fault test against real API servers; make test runs it")
	}
	const (
		cycles          = 100
		n               = 10
		goroutineSlack  = 5
		heapSlackFixed  = 4 << 20
		heapSlackFactor = 0.10
	)
	ns := namespace(t, "churn")
	for _, m := range members {
		configMaps(t, m, ns, n)
	}
	// What runs before the Server (the fleet, the test's own connections,
	// earlier tests' leftovers) is not the Server's.
	ignore := goleak.IgnoreCurrent()

	r := startFaultServer(t, ns, logr.Discard(), false)
	for _, m := range []string{"a", "b"} {
		if err := r.srv.Add(fleet.Cluster(m).Named); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{"a", "b"} {
		waitPhase(t, r.srv, m, server.PhaseReady, 60*time.Second)
	}
	w := newWorkload(t, r.rec, ns, n, membersNamed("a", "b"), 2*time.Second)
	w.start()
	defer w.stop()

	churn := config.NewNamedConfig("churn", fleet.Cluster("c").Config)
	var toReady, toDelete []time.Duration
	cycle := func() {
		t.Helper()
		begin := time.Now()
		if err := r.srv.Add(churn); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, r.srv, "churn", server.PhaseReady, 30*time.Second)
		ready := time.Now()
		if err := r.srv.Delete("churn"); err != nil {
			t.Fatal(err)
		}
		toReady = append(toReady, ready.Sub(begin))
		toDelete = append(toDelete, time.Since(ready))
	}
	// Warm up: first use fills process-wide caches (REST mappings, metric
	// series, codec caches) that are not per cluster.
	for range 3 {
		cycle()
	}
	w.pause.Lock()
	g0, h0 := runtime.NumGoroutine(), heapInUse()
	w.pause.Unlock()

	toReady, toDelete = nil, nil
	begin := time.Now()
	for range cycles {
		cycle()
	}
	took := time.Since(begin)
	// The churned cluster reconciled its objects while it was there.
	if behind := r.rec.behind("churn", objNames(n), 0); len(behind) > 0 {
		t.Errorf("churn never reconciled %v", behind)
	}
	if names := r.srv.ClusterNames(); !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("clusters after the churn: %v", names)
	}

	// Connections of a deleted member are closed at once, but net/http and
	// x/net/http2 keep each closed connection's transport, TLS state and
	// buffers reachable from timers (HTTP/2 health check, idle timeout)
	// for up to 90s: right after a fast churn the heap holds ~100 KiB per
	// cycle, which is released once those timers fire. So: take a reading
	// right away, then poll until the heap is back.
	measure := func() (int, uint64) {
		w.pause.Lock()
		defer w.pause.Unlock()
		return runtime.NumGoroutine(), heapInUse()
	}
	gNow, hNow := measure()
	heapLimit := h0 + max(heapSlackFixed, uint64(float64(h0)*heapSlackFactor))
	var g1 int
	var h1 uint64
	settleBegin := time.Now()
	for deadline := settleBegin.Add(150 * time.Second); ; time.Sleep(5 * time.Second) {
		g1, h1 = measure()
		if (g1 <= g0+goroutineSlack && h1 <= heapLimit) || time.Now().After(deadline) {
			break
		}
	}
	settled := time.Since(settleBegin)
	if g1 > g0+goroutineSlack {
		t.Errorf("goroutines: %d after %d cycles, baseline %d (slack %d)", g1, cycles, g0, goroutineSlack)
	}
	if h1 > heapLimit {
		t.Errorf("heap in use: %s after %d cycles and %s, baseline %s (limit %s)", mib(h1), cycles, dur(settled), mib(h0), mib(heapLimit))
	}

	w.stop()
	if missed := w.summary().missed; missed > 0 {
		t.Errorf("the steady members missed %d rounds during the churn", missed)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	fleet.CloseConnections()
	leak := "none"
	if err := goleak.Find(ignore); err != nil {
		leak = "FOUND"
		t.Errorf("goroutines left after Start returned: %v", err)
	}

	slices.Sort(toReady)
	slices.Sort(toDelete)
	t.Logf("figure: churn: %d Add→Ready→Delete cycles in %s; Add→Ready p50 %s max %s; Delete p50 %s max %s",
		cycles, dur(took), dur(toReady[len(toReady)/2]), dur(toReady[len(toReady)-1]), dur(toDelete[len(toDelete)/2]), dur(toDelete[len(toDelete)-1]))
	t.Logf("figure: churn: goroutines baseline %d → %d right after the churn → final %d (slack %d)", g0, gNow, g1, goroutineSlack)
	t.Logf("figure: churn: HeapInuse baseline %s → %s right after the churn → final %s, %s later (limit: baseline + max(%s, %.0f%%)); goleak after Start returned: %s",
		mib(h0), mib(hNow), mib(h1), dur(settled), mib(heapSlackFixed), heapSlackFactor*100, leak)
	w.report(t, "churn: steady members (a, b)")
}
