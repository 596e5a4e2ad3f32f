package schedwait

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// chatter makes the scheduler take samples: goroutines that sleep and wake
// in turn, as a process of watches and requests does, until ctx ends.
func chatter(ctx context.Context, wg *sync.WaitGroup) {
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
}

// TestWaitingWhileEveryCoreIsTaken: goroutines that never block, more of
// them than there are cores, make the others wait for a CPU, and the Gauge
// says so; once they stop, it says they do not wait any more.
func TestWaitingWhileEveryCoreIsTaken(t *testing.T) {
	defer leakcheck.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	chatter(ctx, &wg)

	// A millisecond: the default (200µs) may see the machine's other
	// processes, and this test waits for a window without spinning only.
	g := Gauge{Threshold: time.Millisecond}
	spin, stopSpin := context.WithCancel(ctx)
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for spin.Err() == nil {
			}
		})
	}
	if !eventually(10*time.Second, g.Waiting) {
		t.Fatal("every core taken by spinning goroutines: Waiting never said so")
	}
	stopSpin()
	// The machine's other processes may keep its cores busy for a while:
	// a window without them comes sooner or later.
	if !eventually(60*time.Second, func() bool { return !g.Waiting() }) {
		t.Fatal("spinning stopped: Waiting still says goroutines wait for a CPU")
	}
}

// TestAStaleWindowStartsAfresh: a reading long after the last one says
// "not waiting" whatever that old window held, and takes its verdict from
// the next window.
func TestAStaleWindowStartsAfresh(t *testing.T) {
	g := Gauge{MaxWindow: 50 * time.Millisecond, MinWindow: time.Millisecond, MinSamples: 1}
	g.Waiting()
	g.mu.Lock()
	g.waiting = true // as if the last window had been busy
	g.lastAt = time.Now().Add(-time.Second)
	g.mu.Unlock()
	if g.Waiting() {
		t.Fatal("a reading a second after the last one kept the old verdict")
	}
}

// TestMeanSince: each new sample counts at its bucket's lower bound, the
// first bucket (from minus infinity) at zero; old counts do not count.
func TestMeanSince(t *testing.T) {
	h := &metrics.Float64Histogram{
		Buckets: []float64{math.Inf(-1), 0.001, 0.01, math.Inf(1)},
		Counts:  []uint64{5, 3, 2},
	}
	n, mean := meanSince([]uint64{1, 1, 0}, h)
	if n != 8 || math.Abs(mean-(2*0.001+2*0.01)/8) > 1e-12 {
		t.Fatalf("meanSince = %d samples, mean %g", n, mean)
	}
	if n, mean := meanSince([]uint64{5, 3, 2}, h); n != 0 || mean != 0 {
		t.Fatalf("no new samples: %d, %g", n, mean)
	}
}

func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}
