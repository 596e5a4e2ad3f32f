package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// queueStart starts a goroutine that waits at q for a slot under ctx, and
// returns once it waits (so that the order of arrivals is the order of the
// calls). The slot, or the error, arrives on the returned channel.
func queueStart(ctx context.Context, t *testing.T, q *startGate) <-chan startResult {
	t.Helper()
	queued := make(chan struct{})
	out := make(chan startResult, 1)
	go func() {
		s, err := q.acquire(ctx, func() { close(queued) })
		out <- startResult{s, err}
	}()
	select {
	case <-queued:
	case r := <-out:
		t.Fatalf("start got a slot without waiting (%v)", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("start did not queue")
	}
	return out
}

type startResult struct {
	slot *startSlot
	err  error
}

func mustAcquire(t *testing.T, q *startGate) *startSlot {
	t.Helper()
	s, err := q.acquire(context.Background(), func() { t.Error("a free slot made a start wait") })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func expectGranted(t *testing.T, which string, ch <-chan startResult) *startSlot {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", which, r.err)
		}
		return r.slot
	case <-time.After(10 * time.Second):
		t.Fatalf("%s got no slot", which)
	}
	return nil
}

func expectWaiting(t *testing.T, which string, ch <-chan startResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s got a slot out of turn (%v)", which, r.err)
	default:
	}
}

// expectTimersGone waits for the goroutines of slots' timers that fired
// to be gone, down to those ignore knew of.
func expectTimersGone(t *testing.T, ignore goleak.Option) {
	t.Helper()
	test.Eventually(t, 10*time.Second, "the slots' timers are gone", func() bool {
		return goleak.Find(ignore) == nil
	})
}

func expectStats(t *testing.T, q *startGate, busy, waiting int) {
	t.Helper()
	if b, w := q.stats(); b != busy || w != waiting {
		t.Fatalf("gate holds %d slots with %d waiting, want %d and %d", b, w, busy, waiting)
	}
}

// TestStartGateNewestFirstOldestEveryFourth: a freed slot goes to the
// newest waiting start, except every fourth, which goes to the oldest.
func TestStartGateNewestFirstOldestEveryFourth(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	q := newStartGate(1, 0, 0)
	held := mustAcquire(t, q)
	var w [6]<-chan startResult
	for i := range w {
		w[i] = queueStart(context.Background(), t, q)
	}
	expectStats(t, q, 1, 6)
	// Grants 1-3 newest, 4 oldest, 5-7 newest, 8 oldest.
	for _, want := range []int{5, 4, 3, 0, 2, 1} {
		held.release()
		held = expectGranted(t, "start", w[want])
		for i := range w {
			if i != want {
				select {
				case r := <-w[i]:
					t.Fatalf("start %d got a slot (%v) where %d should have", i, r.err, want)
				default:
				}
			}
		}
	}
	held.release()
	expectStats(t, q, 0, 0)
}

// TestStartGateOldestProgressesUnderArrivals: while new starts keep
// arriving faster than slots free, newest-first would leave the first one
// waiting forever; it gets a slot within oldestEvery grants, and so does
// each oldest after it.
func TestStartGateOldestProgressesUnderArrivals(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	q := newStartGate(1, 0, 0)
	held := mustAcquire(t, q)
	type waiter struct {
		id int
		ch <-chan startResult
	}
	var waiting []waiter
	next := 0
	arrive := func() {
		waiting = append(waiting, waiter{next, queueStart(context.Background(), t, q)})
		next++
	}
	// takeAny waits until one of the waiting starts got the slot.
	takeAny := func(grant int) (int, *startSlot) {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for i, w := range waiting {
				select {
				case r := <-w.ch:
					waiting = append(waiting[:i], waiting[i+1:]...)
					return w.id, r.slot
				default:
				}
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("grant %d: no start got the slot", grant)
		return 0, nil
	}
	arrive()
	arrive()
	for grant := 1; grant <= 40; grant++ {
		arrive() // two arrive for each slot freed: the backlog grows
		arrive()
		oldest, newest := waiting[0].id, next-1
		held.release()
		var got int
		got, held = takeAny(grant)
		want := newest
		if grant%oldestEvery == 0 {
			want = oldest
		}
		if got != want {
			t.Fatalf("grant %d went to start %d, want %d (oldest %d, newest %d)", grant, got, want, oldest, newest)
		}
	}
	for grant := 41; len(waiting) > 0; grant++ {
		held.release()
		_, held = takeAny(grant)
	}
	held.release()
	expectStats(t, q, 0, 0)
}

// TestStartGateLeavingWhileWaitingIsImmediate: a start whose context ends
// while it waits (its member deleted) returns at once with that error,
// holds no slot, and leaves no trace in the queue: the next freed slot
// goes to another start.
func TestStartGateLeavingWhileWaitingIsImmediate(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	q := newStartGate(1, 0, 0)
	held := mustAcquire(t, q)
	older := queueStart(context.Background(), t, q)
	ctx, cancel := context.WithCancel(context.Background())
	leaving := queueStart(ctx, t, q)
	newer := queueStart(context.Background(), t, q)
	expectStats(t, q, 1, 3)
	begin := time.Now()
	cancel()
	select {
	case r := <-leaving:
		if !errors.Is(r.err, context.Canceled) || r.slot != nil {
			t.Fatalf("a start whose context ended got %v, %v; want no slot and context.Canceled", r.slot, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a start whose context ended still waits")
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("leaving the queue took %s", took)
	}
	expectStats(t, q, 1, 2)
	held.release()
	held = expectGranted(t, "the newest start left", newer)
	expectWaiting(t, "the older start", older)
	held.release()
	expectGranted(t, "the older start", older).release()
	expectStats(t, q, 0, 0)

	// A context that ended before the start came never queues.
	if s, err := q.acquire(ctx, func() { t.Error("queued with its context ended") }); s != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("acquire with an ended context: %v, %v", s, err)
	}
	expectStats(t, q, 0, 0)
}

// TestStartGateRaces: starts from many goroutines acquire, give up
// (contexts ending at random, some just as a slot is handed to them) and
// release, twice some of them, and hold-expiry timers fire meanwhile. At
// the end no slot is held and none waits. Run with -race.
func TestStartGateRaces(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	const limit, starts = 3, 400
	q := newStartGate(limit, 20*time.Millisecond, 0)
	var granted atomic.Int32
	var wg sync.WaitGroup
	for i := range uint64(starts) {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(i, 7))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if r.IntN(3) == 0 {
				time.AfterFunc(time.Duration(r.IntN(2000))*time.Microsecond, cancel)
			}
			s, err := q.acquire(ctx, nil)
			if err != nil {
				if s != nil {
					t.Error("a start that gave up holds a slot")
				}
				return
			}
			granted.Add(1)
			time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
			s.release()
			if r.IntN(4) == 0 {
				s.release() // a second release gives nothing back
			}
		})
	}
	wg.Wait()
	// A slot whose hold expired lets one more start in while its holder
	// runs on (TestStartGateNeverExceedsLimit checks the bound without
	// expiry): what matters here is the gate's own count at the end.
	expectStats(t, q, 0, 0)
	if granted.Load() == 0 {
		t.Fatal("no start ever got a slot")
	}
}

// TestStartGateNeverExceedsLimit: with no hold expiry, at most limit
// starts hold a slot at any instant, however they arrive and leave.
func TestStartGateNeverExceedsLimit(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	const limit, starts = 4, 300
	q := newStartGate(limit, 0, 0)
	var inside atomic.Int32
	var wg sync.WaitGroup
	for i := range starts {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%50)*time.Millisecond)
			defer cancel()
			s, err := q.acquire(ctx, nil)
			if err != nil {
				return
			}
			if n := inside.Add(1); n > limit {
				t.Errorf("%d starts hold a slot at once; the limit is %d", n, limit)
			}
			time.Sleep(100 * time.Microsecond)
			inside.Add(-1)
			s.release()
		})
	}
	wg.Wait()
	expectStats(t, q, 0, 0)
}

// TestStartGateHoldExpires: a start that keeps its slot past the hold
// gives it back by itself, to the next waiting start; its own release
// later gives nothing back twice.
func TestStartGateHoldExpires(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	q := newStartGate(1, 50*time.Millisecond, 0)
	slow := mustAcquire(t, q)
	next := queueStart(context.Background(), t, q)
	s := expectGranted(t, "the start after one that held its slot too long", next)
	expectStats(t, q, 1, 0)
	slow.release() // expired already: nothing to give back
	expectStats(t, q, 1, 0)
	s.release()
	expectStats(t, q, 0, 0)
	expectTimersGone(t, ignore)
}

// TestStartGateCheckHold: a start whose check has not answered within
// the gate's checkHold gives its slot back then (it waits on the network);
// one whose check answered keeps it for the rest of the hold, or, with no
// hold, until it releases it. A check answering after its checkHold gives
// nothing back twice.
func TestStartGateCheckHold(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	// A hold long beside a loaded machine's scheduling delays: the bounds
	// below tell "at checkHold" from "at the hold" by a wide margin.
	const checkHold = 30 * time.Millisecond
	for _, hold := range []time.Duration{2 * time.Second, 0} {
		t.Run(fmt.Sprintf("hold=%s", hold), func(t *testing.T) {
			q := newStartGate(1, hold, checkHold)
			q.cpuBusy = func() bool { return false } // cores to spare

			// No answer: the slot goes to the next start after checkHold.
			far := mustAcquire(t, q)
			begin := time.Now()
			s := expectGranted(t, "the start after one whose check got no answer", queueStart(context.Background(), t, q))
			if took := time.Since(begin); took >= hold/2 && hold > 0 {
				t.Errorf("slot given back after %s, want about %s (checkHold), before the hold %s", took, checkHold, hold)
			}
			far.checked() // answered too late: given back already
			expectStats(t, q, 1, 0)
			far.release()
			expectStats(t, q, 1, 0)

			// Answered: kept past checkHold.
			granted := time.Now()
			s.checked()
			next := queueStart(context.Background(), t, q)
			time.Sleep(3 * checkHold) // the window in which the slot must stay held
			expectWaiting(t, "a start behind one whose check answered", next)
			expectStats(t, q, 1, 1)
			if hold > 0 {
				s2 := expectGranted(t, "the start after the hold expired", next)
				if took := time.Since(granted); took < hold/2 {
					t.Errorf("slot of a checked start given back after %s, want the hold %s", took, hold)
				}
				s.release() // expired already
				expectStats(t, q, 1, 0)
				s2.release()
			} else {
				s.release()
				expectGranted(t, "the start after the release", next).release()
			}
			expectStats(t, q, 0, 0)
		})
	}
	expectTimersGone(t, ignore)
}

// TestStartGateCheckHoldWhileCPUBusy: while goroutines wait for a CPU, a
// start whose check has not answered keeps its slot past checkHold (its
// check is slow for want of a CPU, as every start is), looking again every
// checkHold: it gives the slot back once the cores have time to spare, or
// when the hold is over, whichever comes first.
func TestStartGateCheckHoldWhileCPUBusy(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	// A hold long beside a loaded machine's scheduling delays, so that
	// "kept for the hold" and "given back at the next look" are told
	// apart by a margin no delay of the test's own goroutine crosses.
	const checkHold, hold = 20 * time.Millisecond, 2 * time.Second
	var busy atomic.Bool
	busy.Store(true)
	var looks atomic.Int32
	q := newStartGate(1, hold, checkHold)
	q.cpuBusy = func() bool { looks.Add(1); return busy.Load() }

	// Busy all along: kept until the hold.
	begin := time.Now()
	slow := mustAcquire(t, q)
	next := queueStart(context.Background(), t, q)
	time.Sleep(5 * checkHold) // the window in which the slot must stay held
	expectWaiting(t, "a start behind one whose check waits while the CPU is busy", next)
	s := expectGranted(t, "the start after the hold", next)
	if took := time.Since(begin); took < hold {
		t.Errorf("slot given back after %s with the CPU busy, want the hold (%s)", took, hold)
	}
	if n := looks.Load(); n < 5 {
		t.Errorf("the CPU asked about %d times in a hold of 100 checkHolds, want it asked every checkHold", n)
	}
	slow.release()

	// Busy, then not: given back at the next look.
	next = queueStart(context.Background(), t, q)
	time.Sleep(3 * checkHold)
	expectWaiting(t, "a start behind one whose check waits while the CPU is busy", next)
	busy.Store(false)
	begin = time.Now()
	s2 := expectGranted(t, "the start after the CPU got time to spare", next)
	if took := time.Since(begin); took > hold/2 {
		t.Errorf("slot given back %s after the CPU got time to spare, want within about checkHold, not the hold (%s)", took, hold)
	}
	s.release()

	// Answered while busy: kept for the hold as any answered start.
	s2.checked()
	busy.Store(true)
	next = queueStart(context.Background(), t, q)
	time.Sleep(3 * checkHold)
	expectWaiting(t, "a start behind one whose check answered", next)
	s2.release()
	expectGranted(t, "the start after the release", next).release()
	expectStats(t, q, 0, 0)
	expectTimersGone(t, ignore)
}

// TestStartGateAsksTheCPUAsASlotIsTaken: a start that takes a slot, at
// once or after waiting, asks the CPU question then, so that the window
// the slot's first look judges begins with the slot: after an idle spell
// the first look would otherwise find a fresh window, which says "not
// waiting" however busy the cores, and give back every unanswered slot of
// a mass registration at once.
func TestStartGateAsksTheCPUAsASlotIsTaken(t *testing.T) {
	var asked atomic.Int32
	q := newStartGate(1, 0, time.Hour) // no look within the test
	q.cpuBusy = func() bool { asked.Add(1); return false }
	first := mustAcquire(t, q)
	if n := asked.Load(); n != 1 {
		t.Fatalf("a slot taken at once asked the CPU %d times, want 1", n)
	}
	next := queueStart(context.Background(), t, q)
	expectWaiting(t, "a start behind the held slot", next)
	first.release()
	expectGranted(t, "the start after the release", next).release()
	if n := asked.Load(); n != 2 {
		t.Fatalf("a slot granted after waiting asked the CPU %d times in all, want 2", n)
	}
}

// TestStartGatePlainBound: limit starts get a slot at once, whatever
// else keeps the cores busy; the next waits, with nothing looking again by
// itself, until a slot frees, and gets it then.
func TestStartGatePlainBound(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	const limit = 3
	q := newStartGate(limit, 0, 0)
	held := make([]*startSlot, 0, limit)
	for range limit {
		held = append(held, mustAcquire(t, q))
	}
	next := queueStart(context.Background(), t, q)
	expectStats(t, q, limit, 1)
	expectWaiting(t, "a start past the bound", next)
	held[1].release()
	held[1] = expectGranted(t, "the start after a slot freed", next)
	expectStats(t, q, limit, 0)
	for _, s := range held {
		s.release()
	}
	expectStats(t, q, 0, 0)
	mustAcquire(t, q).release() // all free again: no wait
}

// TestStartGateDefaultAndOff: Options without MaxConcurrentStarts make a
// gate of 8 slots per core; a negative one makes no gate; a positive one
// makes a gate of that many slots, held for startSlotHold at most.
func TestStartGateDefaultAndOff(t *testing.T) {
	for _, n := range []int{-1, -1000} {
		o := Options{MaxConcurrentStarts: n}
		o.defaults(nil)
		if o.starts != nil {
			t.Errorf("MaxConcurrentStarts %d made a gate of %d slots", n, o.starts.limit)
		}
	}
	def := Options{}
	def.defaults(nil)
	if want := 8 * runtime.GOMAXPROCS(0); def.starts == nil || def.starts.limit != want || def.MaxConcurrentStarts != want {
		t.Errorf("default MaxConcurrentStarts made %+v (option %d), want a gate of %d slots", def.starts, def.MaxConcurrentStarts, want)
	}
	o := Options{MaxConcurrentStarts: 7}
	o.defaults(nil)
	if o.starts == nil || o.starts.limit != 7 || o.starts.hold != startSlotHold || o.starts.checkHold != startCheckHold {
		t.Fatalf("MaxConcurrentStarts 7 made %+v", o.starts)
	}
}

// TestStartGateUnbounded: a nil gate (MaxConcurrentStarts not positive)
// never makes a start wait, and its slots' release does nothing.
func TestStartGateUnbounded(t *testing.T) {
	for _, limit := range []int{0, -1} {
		if q := newStartGate(limit, time.Second, 0); q != nil {
			t.Fatalf("a limit of %d made a gate", limit)
		}
	}
	var q *startGate
	for range 100 {
		s, err := q.acquire(context.Background(), func() { t.Fatal("an unbounded gate made a start wait") })
		if err != nil {
			t.Fatal(err)
		}
		s.release()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.acquire(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("acquire with an ended context on an unbounded gate: %v", err)
	}
}

// TestStartGateCheckedAfterHoldGivesBack: a check that answers once the
// hold is over, before the slot's timer has run (a timer runs late on
// busy cores), gives the slot back then: the rest of the start, its lists
// perhaps hung, holds no slot past the hold.
func TestStartGateCheckedAfterHoldGivesBack(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	const hold = time.Hour
	q := newStartGate(1, hold, hold)
	s := mustAcquire(t, q)
	// As if taken a hold ago, its timer not yet run.
	s.mu.Lock()
	s.taken = s.taken.Add(-2 * hold)
	s.mu.Unlock()
	s.checked()
	expectStats(t, q, 0, 0)
	s.release()
	expectStats(t, q, 0, 0)
}

// TestStartGateNoTimerAfterRelease: a release that comes while the slot's
// timer is looking at it (asking whether goroutines wait for a CPU) leaves
// no timer armed behind it, to fire after the start is long gone.
func TestStartGateNoTimerAfterRelease(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	q := newStartGate(1, time.Hour, time.Millisecond)
	asked, answer := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var calls atomic.Int32
	q.cpuBusy = func() bool {
		if calls.Add(1) == 1 {
			return false // the question asked as the slot is taken
		}
		once.Do(func() { close(asked) })
		<-answer
		return true // busy: the timer would look again
	}
	s := mustAcquire(t, q)
	<-asked // the timer looks, its check unanswered
	released := make(chan struct{})
	go func() { s.release(); close(released) }()
	test.Eventually(t, 10*time.Second, "the slot is given back", func() bool {
		busy, _ := q.stats()
		return busy == 0
	})
	// A next look, if one were set now, would come only after an hour:
	// the timer still armed below is the one set here.
	q.checkHold = time.Hour
	close(answer)
	<-released
	expectTimersGone(t, ignore)
	if s.timer.Stop() {
		t.Fatal("the slot's timer is armed after its release")
	}
	expectStats(t, q, 0, 0)
}

// TestStartGateBacklogged: the gate is backlogged exactly while a start
// waits for a slot; a missing gate (no bound) never is. Members' probes
// ask it (reachOptions), with the bound only.
func TestStartGateBacklogged(t *testing.T) {
	defer leakcheck.VerifyNone(t, goleak.IgnoreCurrent())
	var none *startGate
	if none.backlogged() {
		t.Error("no gate, backlogged")
	}
	q := newStartGate(1, 0, 0)
	if q.backlogged() {
		t.Error("backlogged with every slot free")
	}
	held := mustAcquire(t, q)
	if q.backlogged() {
		t.Error("backlogged with its one slot held and nobody waiting")
	}
	ctx, cancel := context.WithCancel(context.Background())
	waiting := queueStart(ctx, t, q)
	if !q.backlogged() {
		t.Error("not backlogged with a start waiting")
	}
	cancel()
	if r := <-waiting; r.err == nil {
		t.Fatal("a start whose context ended got a slot")
	}
	if q.backlogged() {
		t.Error("backlogged after the waiting start left")
	}
	next := queueStart(context.Background(), t, q)
	held.release()
	expectGranted(t, "the start waiting", next).release()
	if q.backlogged() {
		t.Error("backlogged after the waiting start got its slot")
	}

	bounded := &env{opts: Options{MaxConcurrentStarts: 1}}
	bounded.opts.starts = q
	if o := bounded.reachOptions(); o.Busy == nil || o.MaxLeftOut != probesLeftOut {
		t.Errorf("with a bound: Busy set %v, MaxLeftOut %d; want set, %d", o.Busy != nil, o.MaxLeftOut, probesLeftOut)
	}
	if o := (&env{}).reachOptions(); o.Busy != nil {
		t.Error("without a bound, probes ask whether starts are backlogged")
	}
}
