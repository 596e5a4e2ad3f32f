package leaninformer

import (
	"maps"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// idle reports whether no handler of i has an event queued or being
// handed to it.
func (i *Informer) idle() bool {
	i.mu.Lock()
	handlers := i.handlers
	i.mu.Unlock()
	for _, r := range handlers {
		r.mu.Lock()
		busy := r.delivering || len(r.pending) > 0
		r.mu.Unlock()
		if busy {
			return false
		}
	}
	return true
}

// gate makes a recorder block in its callbacks while closed is not.
type gate struct {
	once    sync.Once
	open    chan struct{}
	waiting chan struct{} // closed once a callback waits at the gate
	wonce   sync.Once
}

func newGate() *gate { return &gate{open: make(chan struct{}), waiting: make(chan struct{})} }

func (g *gate) hook(*recorder, int, string) {
	g.wonce.Do(func() { close(g.waiting) })
	<-g.open
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// TestBlockedHandlerHoldsUpNoOther: a handler that blocks — in the initial
// list and after — holds up neither the store nor the informer's other
// handlers, before the start or added later; its registration has not
// synced while it has not been handed the initial list; once it
// unblocks it gets every event, in order.
func TestBlockedHandlerHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	for _, joinLate := range []bool{false, true} {
		name := map[bool]string{false: "added before the start", true: "added after the sync"}[joinLate]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeServer("a", "b", "c")
			inf := newInformer(srv, &corev1.ConfigMap{}, 0, nil, clock.RealClock{})
			fast, slow := newRecorder("fast"), newRecorder("slow")
			g := newGate()
			t.Cleanup(g.release)
			slow.hook = g.hook
			fast.register(t, inf, nil)
			if !joinLate {
				slow.register(t, inf, nil)
			}
			runSynced(t, inf)
			if joinLate {
				slow.register(t, inf, nil)
			}
			waitFor(t, 5*time.Second, "the slow handler to block", closed(g.waiting))
			waitFor(t, 5*time.Second, "the fast handler to sync", fast.registration().HasSynced)

			for i := range 50 {
				srv.set("a", strconv.Itoa(i), true)
				srv.set("d", "x", true)
				srv.remove("d", true)
			}
			srv.set("e", "1", true)
			want := srv.snapshot()
			waitFor(t, 5*time.Second, "the store to follow the server", func() bool { return maps.Equal(storeRVs(inf), want) })
			waitFor(t, 5*time.Second, "the fast handler to follow the server", func() bool { return fast.matches(want) })
			if slow.registration().HasSynced() {
				t.Error("the blocked handler's registration has synced before it was handed the initial list")
			}
			if n := slow.snapshot().events; n != 1 {
				t.Errorf("the blocked handler got %d events, want the 1 it blocks in", n)
			}

			g.release()
			waitFor(t, 5*time.Second, "the slow handler to catch up", func() bool { return slow.matches(want) })
			waitFor(t, 5*time.Second, "the slow handler to sync", slow.registration().HasSynced)
			for _, r := range []*recorder{fast, slow} {
				r.noProblems(t)
				if s := r.snapshot(); s.initial != 3 || s.adds != 51 || s.deletes != 50 || s.updates != 50 {
					t.Errorf("%s: %d initial adds, %d adds, %d updates, %d deletes; want 3, 51, 50, 50", r.name, s.initial, s.adds, s.updates, s.deletes)
				}
			}
		})
	}
}

// TestRemoveBlockedHandler: removing a handler blocked in a callback, with
// events queued behind it, returns at once (from another goroutine or from
// a handler), drops what is queued (the handler gets nothing after the call
// under way), and an informer whose handler blocks stops only once that
// call returns, leaving no goroutine behind either way.
func TestRemoveBlockedHandler(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := newFakeServer("a")
	inf := newInformer(srv, &corev1.ConfigMap{}, 0, nil, clock.RealClock{})
	blocked, stuck, other := newRecorder("blocked"), newRecorder("stuck at stop"), newRecorder("other")
	g, g2 := newGate(), newGate()
	blocked.hook = g.hook
	stuck.hook = func(r *recorder, n int, e string) {
		if n > 1 {
			g2.hook(r, n, e)
		}
	}
	for _, r := range []*recorder{blocked, stuck, other} {
		r.register(t, inf, nil)
	}
	stop := run(t, inf)
	waitFor(t, 5*time.Second, "the handler to block", closed(g.waiting))
	for i := range 20 {
		srv.set("a", strconv.Itoa(i), true)
	}
	want := srv.snapshot()
	waitFor(t, 5*time.Second, "the other handler to follow the server", func() bool { return other.matches(want) })

	removed := make(chan struct{})
	go func() {
		defer close(removed)
		blocked.unregister(t, inf)
	}()
	waitFor(t, 5*time.Second, "RemoveEventHandler to return while the handler blocks", closed(removed))
	g.release()
	waitFor(t, 5*time.Second, "the removed handler's delivery to end", func() bool {
		blocked.mu.Lock()
		defer blocked.mu.Unlock()
		return blocked.events == 1
	})
	if s := blocked.snapshot(); s.late != 0 || s.events != 1 {
		t.Errorf("the removed handler got %d events (%d after its removal), want only the 1 it blocked in", s.events, s.late)
	}

	// The stuck handler blocks in its second event; stopping waits for it.
	waitFor(t, 5*time.Second, "the stuck handler to block", closed(g2.waiting))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	waitFor(t, 5*time.Second, "the informer to stop", inf.IsStopped) // set as Run begins to return
	select {
	case <-stopped:
		t.Error("Run returned while a handler's call was under way")
	default:
	}
	g2.release()
	waitFor(t, 5*time.Second, "Run to return", closed(stopped))
	if n := stuck.snapshot().events; n != 2 {
		t.Errorf("the handler stuck at stop got %d events, want 2 (what was queued is dropped)", n)
	}
	for _, r := range []*recorder{blocked, stuck, other} {
		r.noProblems(t)
	}
	leakcheck.VerifyNone(t, ignore)
}

// TestIdleHandlersCostNoGoroutine: however many handlers an informer has,
// none costs a goroutine while it has nothing to deliver.
func TestIdleHandlersCostNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := newFakeServer("a", "b")
	inf := newInformer(srv, &corev1.ConfigMap{}, 0, nil, clock.RealClock{})
	before := goruntime.NumGoroutine()
	stop := run(t, inf)
	recs := make([]*recorder, 0, 20)
	for i := range cap(recs) {
		r := newRecorder("h" + strconv.Itoa(i))
		r.register(t, inf, nil)
		recs = append(recs, r)
	}
	srv.set("c", "1", true)
	want := srv.snapshot()
	for _, r := range recs {
		waitFor(t, 5*time.Second, r.name+" to follow the server", func() bool { return r.matches(want) })
		waitFor(t, 5*time.Second, r.name+" to sync", r.registration().HasSynced)
	}
	waitFor(t, 5*time.Second, "the deliveries to end", inf.idle)
	// The one that runs it, its pump (shared, but alone here) and the one
	// that waits for the next event of the fake server's watch (a watch
	// whose stream is read here needs none: TestIdleStreamCost); a
	// delivery that has just found its queue empty may take a moment to
	// exit.
	waitFor(t, 5*time.Second, "the informer to add at most 3 goroutines with its handlers idle", func() bool {
		return goruntime.NumGoroutine()-before <= 3
	})
	stop()
	leakcheck.VerifyNone(t, ignore)
}

var _ toolscache.ResourceEventHandler = (*recorder)(nil)
