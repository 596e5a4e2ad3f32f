package leaninformer

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// TestRunnerContextEnds: the end of a Runner's context, without its Stop,
// stops every informer it runs (their watches close, their pump ends), and
// an informer run after it stops at once.
func TestRunnerContextEnds(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	pl := &pool{capacity: 4}
	ctx, cancel := context.WithCancel(context.Background())
	r := NewRunner(ctx)
	srv := newFakeServer("a")
	infs := make([]*Informer, 10) // three pumps
	for k := range infs {
		infs[k] = detachedOn(r, pl, srv)
		infs[k].RunWithContext(context.Background())
	}
	waitFor(t, 5*time.Second, "every informer to sync and watch", func() bool {
		_, _, _, open := srv.counts()
		return open == len(infs)
	})
	cancel()
	for _, inf := range infs {
		waitFor(t, 5*time.Second, "the informers to stop", inf.IsStopped)
	}
	waitFor(t, 5*time.Second, "the watches to close", func() bool { _, _, _, open := srv.counts(); return open == 0 })

	late := detachedOn(r, pl, srv)
	late.RunWithContext(context.Background())
	waitFor(t, 5*time.Second, "an informer run after the context ended to stop", late.IsStopped)
	waitPumpsEnd(t, pl, "the pumps to end")
	r.Stop()
	leakcheck.VerifyNone(t, ignore)
}

// TestStopRacesStart stops informers while they start: detached ones
// stopped from another goroutine at once or a little later, blocking ones
// whose context ends as they run, the Runner's context ending meanwhile.
// Each stops whether its pump had taken it or not, and no pump, watch or
// goroutine is left.
func TestStopRacesStart(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	pl := &pool{capacity: 3}
	srv := newFakeServer("a", "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRunner(ctx)
	var wg sync.WaitGroup
	var infs []*Informer
	for n := range 300 {
		wait := time.Duration(rng.IntN(300)) * time.Microsecond
		if n%3 == 0 {
			inf := newInformer(srv, &corev1.ConfigMap{}, 0, nil, clock.RealClock{})
			inf.pool = pl
			infs = append(infs, inf)
			rctx, rcancel := context.WithCancel(context.Background())
			wg.Go(func() { inf.RunWithContext(rctx) })
			wg.Go(func() { time.Sleep(wait); rcancel() })
			continue
		}
		inf := detachedOn(r, pl, srv)
		infs = append(infs, inf)
		wg.Go(func() { inf.RunWithContext(context.Background()) })
		wg.Go(func() {
			if n%2 == 0 {
				time.Sleep(wait)
			}
			inf.Stop()
		})
		if n == 200 {
			cancel() // the rest find the Runner's context ended
		}
	}
	wg.Wait()
	for _, inf := range infs {
		waitFor(t, 5*time.Second, "every informer to stop", inf.IsStopped)
	}
	waitFor(t, 5*time.Second, "the watches to close", func() bool { _, _, _, open := srv.counts(); return open == 0 })
	waitPumpsEnd(t, pl, "the pumps to end")
	r.Stop()
	leakcheck.VerifyNone(t, ignore)
}

// maxIdleInformerBytes bounds TestIdleInformerHeap: a member pays it per
// watched kind, besides the watch's connection and the objects.
const maxIdleInformerBytes = 1800

// TestIdleInformerHeap measures the heap an idle, synced informer of a
// Runner holds beyond its store (a fake watch, one handler, no object):
// the part of a member's cost per watched kind that this package decides.
func TestIdleInformerHeap(t *testing.T) {
	const n = 400
	pl := &pool{capacity: pumpCapacity}
	// A first batch, stopped before measuring, takes what the process
	// allocates once (pools, caches of types): without it, a run of this
	// test alone counted some 170 bytes more per informer.
	warm := NewRunner(context.Background())
	for range n / 4 {
		inf := detachedOn(warm, pl, newFakeServer())
		inf.RunWithContext(context.Background())
		waitFor(t, 5*time.Second, "the first batch to sync", inf.HasSynced)
	}
	warm.Stop()
	waitPumpsEnd(t, pl, "the first batch's pump to end")
	r := NewRunner(context.Background())
	t.Cleanup(r.Stop)
	srv := newFakeServer()
	infs := make([]*Informer, n)
	for k := range infs {
		infs[k] = detachedOn(r, pl, srv)
		newRecorder("idle").register(t, infs[k], nil)
	}
	before := heapInUse()
	for _, inf := range infs {
		inf.RunWithContext(context.Background())
	}
	waitFor(t, 10*time.Second, "every informer to sync and watch", func() bool {
		_, _, _, open := srv.counts()
		return open == n
	})
	for _, inf := range infs {
		waitFor(t, 5*time.Second, "every informer to sync", inf.HasSynced)
	}
	// Idle: the pump has handled every message and let go of the buffers
	// the start grew, which it does before it waits for the next.
	waitFor(t, 5*time.Second, "the pump to wait for its next message", pumpsWait)
	// Less the fake watches' channels, whose buffer no real watch has.
	chans := int64(n) * int64(cap(make(chan watch.Event, 1<<15))) * int64(unsafe.Sizeof(watch.Event{}))
	per := float64(heapInUse()-before-chans) / n
	t.Logf("%.0f bytes per idle informer", per)
	if per > maxIdleInformerBytes {
		t.Errorf("an idle informer holds %.0f bytes, want at most %d", per, maxIdleInformerBytes)
	}
	runtime.KeepAlive(infs)
}

// pumpsWait reports whether every pump of the process waits for its next
// message.
func pumpsWait() bool {
	for _, g := range goroutineStacks() {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(g, "leaninformer.(*pump).loop") && !strings.Contains(header, "[chan receive") {
			return false
		}
	}
	return true
}

func heapInUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc) //nolint:gosec // G115: a test's heap is far below 2^63
}
