package leaninformer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/mccr-dev/mccr/internal/leakcheck"
)

// closeWatches ends every watch without an error, as a watch's timeout
// or a dropped connection does.
func (s *fakeServer) closeWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.closeLocked()
	}
}

// scripted is a fakeServer that records the resource versions it is asked
// to list and watch from, and fails as told: lists from a version other
// than "0" or "" with 410 Expired (as once the version has been
// compacted), and the next watches with watchErrs.
type scripted struct {
	*fakeServer
	expireLists bool

	mu        sync.Mutex
	listRVs   []string
	watchRVs  []string
	watchErrs []error
}

func (s *scripted) List(opts metav1.ListOptions) (kruntime.Object, error) {
	s.mu.Lock()
	s.listRVs = append(s.listRVs, opts.ResourceVersion)
	expired := s.expireLists && opts.ResourceVersion != "" && opts.ResourceVersion != "0"
	s.mu.Unlock()
	if expired {
		return nil, apierrors.NewResourceExpired("too old resource version")
	}
	return s.fakeServer.List(opts)
}

func (s *scripted) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	s.watchRVs = append(s.watchRVs, opts.ResourceVersion)
	var err error
	if len(s.watchErrs) > 0 {
		err, s.watchErrs = s.watchErrs[0], s.watchErrs[1:]
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if opts.TimeoutSeconds == nil || *opts.TimeoutSeconds < 300 || *opts.TimeoutSeconds > 600 || !opts.AllowWatchBookmarks {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("watch options %+v: want a timeout of 5 to 10 minutes and bookmarks", opts))
	}
	return s.fakeServer.Watch(opts)
}

func (s *scripted) failNextWatches(errs ...error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchErrs = append(s.watchErrs, errs...)
}

func (s *scripted) requests() (lists, watches []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.listRVs), slices.Clone(s.watchRVs)
}

// errorLog records what reaches the watch-error handler.
type errorLog struct {
	mu   sync.Mutex
	errs []error
	kind []string
}

func (l *errorLog) handler(_ context.Context, r *toolscache.Reflector, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
	l.kind = append(l.kind, r.TypeDescription())
}

func (l *errorLog) snapshot() ([]error, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs), slices.Clone(l.kind)
}

// TestWatchEndRewatches: a watch that ends on its own after events is
// opened again at once from the last resource version seen (a bookmark's
// among them), without a list; one that ends within a second without an
// event counts as a failure: a list follows, after the backoff.
func TestWatchEndRewatches(t *testing.T) {
	t.Parallel()
	srv := &scripted{fakeServer: newFakeServer("a")}
	inf := New(srv, &corev1.ConfigMap{}, 0, nil)
	rec := newRecorder("h")
	rec.register(t, inf, nil)
	runSynced(t, inf)
	waitFor(t, 5*time.Second, "the watch", func() bool { _, _, _, open := srv.counts(); return open == 1 })

	srv.set("a", "1", true)
	rv := srv.bookmark()
	waitFor(t, 5*time.Second, "the bookmark", func() bool { return inf.LastSyncResourceVersion() == rv })
	srv.closeWatches()
	waitFor(t, 5*time.Second, "a second watch", func() bool { _, w := srv.requests(); return len(w) == 2 })
	lists, watches := srv.requests()
	if want := []string{"0"}; !slices.Equal(lists, want) {
		t.Errorf("lists from %q, want %q", lists, want)
	}
	if watches[1] != rv {
		t.Errorf("watched again from %q, want the bookmark's %q", watches[1], rv)
	}
	srv.set("b", "1", true)
	want := srv.snapshot()
	waitFor(t, 5*time.Second, "the handler to see the change after the new watch", func() bool { return rec.matches(want) })

	// That watch had an event: it is opened again at once too. The next
	// ends at once, without an event: a list follows, after the backoff.
	srv.closeWatches()
	waitFor(t, 5*time.Second, "a third watch", func() bool { _, _, _, open := srv.counts(); _, w := srv.requests(); return open == 1 && len(w) == 3 })
	if l, _ := srv.requests(); len(l) != 1 {
		t.Errorf("%d lists after two watches that ended on their own, want 1", len(l))
	}
	ended := time.Now()
	srv.closeWatches()
	waitFor(t, 5*time.Second, "a list after a very short watch", func() bool { l, _ := srv.requests(); return len(l) == 2 })
	if gap := time.Since(ended); gap < 700*time.Millisecond {
		t.Errorf("listed %v after the very short watch, want the backoff (at least 800ms)", gap)
	}
	waitFor(t, 5*time.Second, "a watch after the list", func() bool { _, _, _, open := srv.counts(); return open == 1 })
	rec.noProblems(t)
}

// TestRelistOnExpired: a watch that ends with 410 Expired is followed by a
// list from the last version seen; when that version is gone too, by a
// list from etcd (""), at once; the store and handlers end with the
// server.
func TestRelistOnExpired(t *testing.T) {
	t.Parallel()
	srv := &scripted{fakeServer: newFakeServer("a", "b")}
	inf := New(srv, &corev1.ConfigMap{}, 0, nil)
	rec := newRecorder("h")
	rec.register(t, inf, nil)
	runSynced(t, inf)
	waitFor(t, 5*time.Second, "the watch", func() bool { _, _, _, open := srv.counts(); return open == 1 })
	srv.set("a", "1", true)
	waitFor(t, 5*time.Second, "the change", func() bool { return rec.matches(srv.snapshot()) })
	last := inf.LastSyncResourceVersion()

	srv.mu.Lock()
	srv.expireLists = true
	srv.mu.Unlock()
	srv.remove("b", false)
	srv.set("c", "1", false)
	srv.expireWatches()
	waitFor(t, 5*time.Second, "two more lists", func() bool { l, _ := srv.requests(); return len(l) == 3 })
	want := srv.snapshot()
	waitFor(t, 5*time.Second, "the store to match the server", func() bool { return maps.Equal(storeRVs(inf), want) })
	waitFor(t, 5*time.Second, "the handler to match the server", func() bool { return rec.matches(want) })
	lists, _ := srv.requests()
	if wantLists := []string{"0", last, ""}; !slices.Equal(lists, wantLists) {
		t.Errorf("lists from %q, want %q", lists, wantLists)
	}
	waitFor(t, 5*time.Second, "a watch after the relist", func() bool { _, w := srv.requests(); return len(w) == 2 })
	_, watches := srv.requests()
	if got, want := watches[1], strconv.Itoa(srv.rv); got != want {
		t.Errorf("watched after the relist from %q, want the list's %q", got, want)
	}
	if s := rec.snapshot(); s.tombstones != 1 {
		t.Errorf("%d tombstones, want 1 (b, deleted while the watch was down)", s.tombstones)
	}
	rec.noProblems(t)
}

// TestWatchOpenErrors: a watch that cannot be opened goes to the
// watch-error handler (with the kind named) and is followed by a list
// after the backoff; a refused connection or 429 is tried again after the
// backoff, without a list or the handler, as client-go's reflector does
// (the backoff grows with each attempt: 0.8, 1.6, then 3.2s, with jitter
// up to as much again).
func TestWatchOpenErrors(t *testing.T) {
	t.Parallel()
	srv := &scripted{fakeServer: newFakeServer("a")}
	inf := New(srv, &corev1.ConfigMap{}, 0, nil)
	var log errorLog
	if err := inf.SetWatchErrorHandlerWithContext(log.handler); err != nil {
		t.Fatal(err)
	}
	runSynced(t, inf)
	waitFor(t, 5*time.Second, "the watch", func() bool { _, _, _, open := srv.counts(); return open == 1 })

	refused := fmt.Errorf("dial tcp 127.0.0.1:1: connect: %w", syscall.ECONNREFUSED)
	srv.failNextWatches(refused, apierrors.NewTooManyRequests("slow down", 1))
	srv.set("a", "1", true) // an event, so that its end is not a failure
	waitFor(t, 5*time.Second, "the event", func() bool { return inf.LastSyncResourceVersion() == strconv.Itoa(srv.rv) })
	srv.closeWatches()
	waitFor(t, 10*time.Second, "a watch after two refusals", func() bool { _, _, _, open := srv.counts(); return open == 1 })
	lists, watches := srv.requests()
	if len(lists) != 1 || len(watches) != 4 {
		t.Errorf("%d lists and %d watches after two refused watches, want 1 and 4", len(lists), len(watches))
	}
	if errs, _ := log.snapshot(); len(errs) != 0 {
		t.Errorf("refused watches reached the watch-error handler: %v", errs)
	}

	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RBAC rule"))
	srv.failNextWatches(forbidden)
	srv.set("a", "2", true)
	waitFor(t, 5*time.Second, "the event", func() bool { return inf.LastSyncResourceVersion() == strconv.Itoa(srv.rv) })
	ended := time.Now()
	srv.closeWatches()
	waitFor(t, 15*time.Second, "a list after the forbidden watch", func() bool { l, _ := srv.requests(); return len(l) == 2 })
	if gap := time.Since(ended); gap < 700*time.Millisecond {
		t.Errorf("listed %v after the failed watch, want the backoff (at least 800ms)", gap)
	}
	errs, kinds := log.snapshot()
	if len(errs) != 1 || !apierrors.IsForbidden(errs[0]) {
		t.Errorf("watch-error handler got %v, want the one Forbidden", errs)
	} else if kinds[0] != "*v1.ConfigMap" {
		t.Errorf("the handler's Reflector names the kind %q, want *v1.ConfigMap", kinds[0])
	}
}

// waitPumpsEnd waits for every pump of pl to end.
func waitPumpsEnd(t *testing.T, pl *pool, what string) {
	t.Helper()
	waitFor(t, 5*time.Second, what, func() bool {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return len(pl.pumps) == 0
	})
}

// detachedOn returns an informer of srv that r runs detached, on the
// pumps of pl.
func detachedOn(r *Runner, pl *pool, lw toolscache.ListerWatcher) *Informer {
	inf := r.New(lw, &corev1.ConfigMap{}, 0, nil).(*Informer)
	inf.pool = pl
	return inf
}

// TestBurstStarvesNoOther: informers share a pump; while the pump works
// through a burst of events of one of them (a slow transform makes the
// burst last), a change to each of the others reaches their handlers long
// before the burst is done.
func TestBurstStarvesNoOther(t *testing.T) {
	t.Parallel()
	const others, burst = 20, 3000
	pl := &pool{capacity: others + 1}
	r := NewRunner(context.Background())
	t.Cleanup(r.Stop)

	busySrv := newFakeServer("a")
	busy := detachedOn(r, pl, busySrv)
	var transformed atomic.Int64
	if err := busy.SetTransform(func(obj any) (any, error) {
		transformed.Add(1)
		time.Sleep(200 * time.Microsecond)
		return obj, nil
	}); err != nil {
		t.Fatal(err)
	}
	busy.RunWithContext(context.Background())

	type other struct {
		srv  *fakeServer
		inf  *Informer
		seen chan int64 // events of the burst stored when its change came
	}
	all := make([]*other, others)
	for k := range all {
		o := &other{srv: newFakeServer("a"), seen: make(chan int64, 1)}
		o.inf = detachedOn(r, pl, o.srv)
		if _, err := o.inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, _ any) {
			select {
			case o.seen <- transformed.Load():
			default:
			}
		}}); err != nil {
			t.Fatal(err)
		}
		o.inf.RunWithContext(context.Background()) // returns at once
		all[k] = o
	}
	waitFor(t, 5*time.Second, "every informer to sync", func() bool {
		return busy.HasSynced() && !slices.ContainsFunc(all, func(o *other) bool { return !o.inf.HasSynced() })
	})
	if n := len(pl.pumps); n != 1 {
		t.Fatalf("%d pumps for %d informers, want 1", n, others+1)
	}

	base := transformed.Load()
	for n := range burst {
		busySrv.set("a", strconv.Itoa(n), true)
	}
	waitFor(t, 10*time.Second, "the burst to be under way", func() bool { return transformed.Load() > base+100 })
	start := time.Now()
	for _, o := range all {
		o.srv.set("a", "changed", true)
	}
	for k, o := range all {
		select {
		case done := <-o.seen:
			if done-base >= burst {
				t.Errorf("informer %d got its change only after the whole burst (%d events)", k, done-base)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("informer %d did not get its change within 10s", k)
		}
	}
	t.Logf("%d informers got their change %v after it was made, with %d of %d events of the burst stored",
		others, time.Since(start), transformed.Load()-base, burst)
	want := busySrv.snapshot()
	waitFor(t, 30*time.Second, "the burst to be stored", func() bool { return maps.Equal(storeRVs(busy), want) })
}

// TestRunnerStop: a Runner's informers run detached (Run returns at
// once) on a shared pump; StopWhere stops only the matching ones, and the
// Runner's Stop waits for a handler call under way before it returns;
// then no watch is open, an informer run later stops at once, and no
// goroutine is left, the pump's included.
func TestRunnerStop(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	pl := &pool{capacity: 8}
	r := NewRunner(context.Background())
	srv := newFakeServer("a", "b")
	infs := make([]*Informer, 3)
	for k := range infs {
		infs[k] = detachedOn(r, pl, srv)
	}
	g := newGate()
	blocked := newRecorder("blocked")
	blocked.hook = func(r *recorder, n int, event string) {
		if event == "update a 1->3" {
			g.hook(r, n, event)
		}
	}
	blocked.register(t, infs[1], nil)
	for _, inf := range infs {
		if !inf.RunsDetached() {
			t.Fatal("a Runner's informer does not run detached")
		}
		inf.RunWithContext(t.Context())
	}
	waitFor(t, 5*time.Second, "every informer to sync and watch", func() bool {
		_, _, _, open := srv.counts()
		return open == len(infs) && !slices.ContainsFunc(infs, func(i *Informer) bool { return !i.HasSynced() })
	})

	r.StopWhere(func(example kruntime.Object) bool { return example == infs[0].example })
	waitFor(t, 5*time.Second, "the matching informer to stop", func() bool { _, _, _, open := srv.counts(); return open == 2 })
	if !infs[0].IsStopped() || infs[1].IsStopped() || infs[2].IsStopped() {
		t.Errorf("stopped: %v %v %v; want only the first", infs[0].IsStopped(), infs[1].IsStopped(), infs[2].IsStopped())
	}

	srv.set("a", "1", true)
	<-g.waiting
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		r.Stop()
	}()
	waitFor(t, 5*time.Second, "the watches to close", func() bool { _, _, _, open := srv.counts(); return open == 0 })
	if closed(stopped)() {
		t.Fatal("the Runner's Stop returned while a handler call was under way")
	}
	g.release()
	waitFor(t, 5*time.Second, "the Runner's Stop to return", closed(stopped))

	late := detachedOn(r, pl, srv)
	late.RunWithContext(context.Background())
	waitFor(t, 5*time.Second, "an informer run after the Runner stopped to stop", late.IsStopped)
	waitPumpsEnd(t, pl, "the pump to end")
	if lists, _, _, _ := srv.counts(); lists != len(infs) {
		t.Errorf("%d lists, want %d", lists, len(infs))
	}
	blocked.noProblems(t)
	leakcheck.VerifyNone(t, ignore)
}

// TestStopFromHandler: a handler may stop its own informer; Stop does not
// wait for the call it is made from.
func TestStopFromHandler(t *testing.T) {
	t.Parallel()
	r := NewRunner(context.Background())
	t.Cleanup(r.Stop)
	srv := newFakeServer("a")
	inf := r.New(srv, &corev1.ConfigMap{}, 0, nil).(*Informer)
	returned := make(chan struct{})
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(any) {
		inf.Stop()
		close(returned)
	}}); err != nil {
		t.Fatal(err)
	}
	inf.RunWithContext(context.Background())
	waitFor(t, 5*time.Second, "Stop called from a handler to return", closed(returned))
	waitFor(t, 5*time.Second, "the informer to stop", inf.IsStopped)
}

// TestPumpChurn starts and stops informers from several goroutines (a
// Runner's, stopped one by one or with a Runner, and blocking ones) over
// servers whose objects change meanwhile, on pools of small pumps that come
// and go; the informers that run to the end match their servers, and once
// all have stopped no pump and no goroutine is left.
func TestPumpChurn(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	pl := &pool{capacity: 3}
	srvs := []*fakeServer{newFakeServer("a", "b"), newFakeServer("c"), newFakeServer()}

	writing := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 0))
		for n := 0; ; n++ {
			select {
			case <-writing:
				return
			default:
			}
			srv := srvs[rng.IntN(len(srvs))]
			name := fmt.Sprintf("cm-%d", rng.IntN(10))
			if rng.IntN(4) == 0 {
				srv.remove(name, true)
			} else {
				srv.set(name, strconv.Itoa(n), true)
			}
			if rng.IntN(50) == 0 {
				srv.bookmark()
			}
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
		}
	})

	type survivor struct {
		srv *fakeServer
		inf toolscache.SharedIndexInformer
		rec *recorder
	}
	var mu sync.Mutex
	var survivors []survivor
	var runners []*Runner
	var blockingStops []func()
	var wg sync.WaitGroup
	for g := range uint64(4) {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, g+1))
			r := NewRunner(context.Background())
			mu.Lock()
			runners = append(runners, r)
			mu.Unlock()
			for j := range 25 {
				srv := srvs[rng.IntN(len(srvs))]
				rec := newRecorder(fmt.Sprintf("g%d-%d", g, j))
				var inf *Informer
				var stop func()
				if rng.IntN(3) == 0 {
					inf = newInformer(srv, &corev1.ConfigMap{}, time.Second, nil, clock.RealClock{})
					inf.pool = pl
					rec.register(t, inf, nil)
					ctx, cancel := context.WithCancel(context.Background())
					done := make(chan struct{})
					go func() {
						defer close(done)
						inf.RunWithContext(ctx)
					}()
					stop = func() { cancel(); <-done }
				} else {
					inf = detachedOn(r, pl, srv)
					rec.register(t, inf, nil)
					inf.RunWithContext(context.Background())
					stop = inf.Stop
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				switch rng.IntN(3) {
				case 0:
					stop()
					rec.noProblems(t)
				case 1:
					mu.Lock()
					survivors = append(survivors, survivor{srv, inf, rec})
					if !inf.RunsDetached() {
						blockingStops = append(blockingStops, stop)
					}
					mu.Unlock()
				default: // left to its Runner's Stop, or stopped at the end
					mu.Lock()
					if !inf.RunsDetached() {
						blockingStops = append(blockingStops, stop)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(writing)
	writer.Wait()
	for _, s := range survivors {
		want := s.srv.snapshot()
		waitFor(t, 10*time.Second, s.rec.name+" to match its server", func() bool {
			return maps.Equal(storeRVs(s.inf), want) && s.rec.matches(want)
		})
		s.rec.noProblems(t)
	}
	t.Logf("%d informers ran to the end", len(survivors))
	for _, r := range runners {
		r.Stop()
	}
	for _, stop := range blockingStops {
		stop()
	}
	waitPumpsEnd(t, pl, "every pump to end")
	leakcheck.VerifyNone(t, ignore)
}

// TestPumpsFillInTurn: a pool starts a pump per capacity informers,
// whatever the number of cores: each informer goes to the first pump with
// room, a new pump starts only once every pump is full, and an informer
// started after others stopped takes their place. Every informer follows
// its server, and once they have stopped no pump is left.
func TestPumpsFillInTurn(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	const capacity = 4
	pl := &pool{capacity: capacity}
	r := NewRunner(context.Background())
	type member struct {
		inf *Informer
		srv *fakeServer
		rec *recorder
	}
	var members []member
	start := func(n int) {
		for range n {
			m := member{srv: newFakeServer("a"), rec: newRecorder("i" + strconv.Itoa(len(members)))}
			m.inf = detachedOn(r, pl, m.srv)
			m.rec.register(t, m.inf, nil)
			m.inf.RunWithContext(context.Background())
			members = append(members, m)
		}
	}
	perPump := func() []int {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		out := make([]int, 0, len(pl.pumps))
		for _, p := range pl.pumps {
			out = append(out, p.assigned)
		}
		return out
	}
	start(2*capacity + 1)
	if got, want := perPump(), []int{capacity, capacity, 1}; !slices.Equal(got, want) {
		t.Errorf("informers per pump %v for %d informers, want %v", got, len(members), want)
	}
	// Two of the first pump's informers stop; two started after them
	// take their places, and no pump starts.
	members[0].inf.Stop()
	members[1].inf.Stop()
	waitFor(t, 5*time.Second, "the stopped informers to leave their pump", func() bool { return perPump()[0] == capacity-2 })
	start(2)
	if got, want := perPump(), []int{capacity, capacity, 1}; !slices.Equal(got, want) {
		t.Errorf("informers per pump %v once two stopped and two started, want %v", got, want)
	}
	for _, m := range members[2:] {
		m.srv.set("a", "changed", true)
	}
	for _, m := range members[2:] {
		want := m.srv.snapshot()
		waitFor(t, 10*time.Second, m.rec.name+" to follow its server", func() bool { return m.rec.matches(want) })
		m.rec.noProblems(t)
	}
	r.Stop()
	waitPumpsEnd(t, pl, "every pump to end")
	leakcheck.VerifyNone(t, ignore)
}

// TestStopGoesFirst: a stop posted while the pump works through a long
// inbox (a fleet starting: a thousand starts and events) is handled before
// the rest of that inbox, so that a member's Delete, which waits for its
// informers to stop, does not wait for the other informers' work.
func TestStopGoesFirst(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	pl := &pool{capacity: 8}
	r := NewRunner(context.Background())
	srv := newFakeServer("a")
	inf := detachedOn(r, pl, srv)
	inf.RunWithContext(context.Background())
	p := inf.run.pump
	// Watching as its pump sees it: the list's outcome handled (a stop
	// handled before it waits for it, rightly).
	waitFor(t, 5*time.Second, "the informer to sync and watch", func() bool {
		watching := make(chan bool, 1)
		p.post(message{kind: msgCall, call: func() { watching <- inf.run.phase == phaseWatching }})
		return <-watching && inf.HasSynced()
	})

	// A batch the pump is in the middle of: a call that waits for the
	// gate, then a thousand that each note whether the informer has been
	// let go by then.
	entered, gate := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var notes []bool
	p.mu.Lock()
	p.inbox = append(p.inbox, message{kind: msgCall, call: func() { close(entered); <-gate }})
	for range 1000 {
		p.inbox = append(p.inbox, message{kind: msgCall, call: func() {
			mu.Lock()
			defer mu.Unlock()
			notes = append(notes, isClosed(inf.released))
		}})
	}
	p.mu.Unlock()
	p.post(message{kind: msgCall, call: func() {}}) // wakes the pump
	<-entered
	inf.Stop()
	close(gate)
	waitFor(t, 5*time.Second, "the informer to be let go", closed(inf.released))
	waitFor(t, 5*time.Second, "the pump to work through its inbox", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(notes) == 1000
	})
	if n := slices.Index(notes, true); n != 0 {
		if n < 0 {
			n = len(notes)
		}
		t.Errorf("the stop was handled after %d of the 1000 messages posted before it, want none", n)
	}
	r.Stop()
	waitPumpsEnd(t, pl, "the pump to end")
	leakcheck.VerifyNone(t, ignore)
}

// TestOnePumpWhateverTheCores: the process's pumps follow the number of
// informers, not of cores: on eight Ps, a hundred informers of the
// default pool run on one pump, so that a further kind costs a cluster its
// watch and no share of a pump (the per-kind figure of the fleet
// benchmark) on any machine.
func TestOnePumpWhateverTheCores(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(8))
	waitPumpsEnd(t, pumps, "the pumps of earlier tests to end")
	r := NewRunner(context.Background())
	srv := newFakeServer("a")
	infs := make([]*Informer, 100)
	for k := range infs {
		infs[k] = r.New(srv, &corev1.ConfigMap{}, 0, nil).(*Informer)
		infs[k].RunWithContext(context.Background())
	}
	for _, inf := range infs {
		waitFor(t, 5*time.Second, "every informer to sync", inf.HasSynced)
	}
	pumps.mu.Lock()
	n := len(pumps.pumps)
	pumps.mu.Unlock()
	if n != 1 {
		t.Errorf("%d pumps for %d informers on 8 Ps, want 1", n, len(infs))
	}
	r.Stop()
	waitPumpsEnd(t, pumps, "the pump to end")
	leakcheck.VerifyNone(t, ignore)
}
