package server

import (
	"context"
	"math"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// startGate decides when a member's start may begin its CPU-heavy part:
// the reachability check (dial, TLS handshake), building the Manager and
// running setups, and the initial lists up to synced caches. Without it, a
// fleet registered at once starts every member together: thousands of
// goroutines doing handshakes and decoding lists share the cores, so each
// start takes as long as the whole burst, and anything else that needs the
// CPU meanwhile (one more member's start, a Delete's stopping member) waits
// behind all of them in the scheduler's run queue.
//
// A start holds a slot while it runs. One slot per core (floor) is always
// handed out; beyond that a start begins only while the process's run
// queue is short (fewer goroutines waiting for a core than there are
// cores), looked at as slots free and every pollEvery while starts wait.
// So the cores stay busy, however much of a start is spent waiting on the
// network (a slow link keeps many starts in flight, a fast one few), and
// whatever must run next waits behind a short queue. An optional limit
// (Options.MaxConcurrentStarts) also bounds the slots held.
//
// Order. The newest waiting start gets a free slot first, so that a member
// added while a large backlog waits (one more cluster joining during a
// mass registration or a restart of the fleet) starts in milliseconds, not
// after the backlog: the backlog takes as long either way, since the gate
// only reorders work that fills the cores anyway. So that newest-first
// starves nothing, every oldestEvery-th slot goes to the oldest waiting
// start instead: the oldest always makes progress, whatever keeps
// arriving.
//
// A start keeps its slot until its caches have synced, it ends, or it has
// held the slot for hold, whichever comes first: a start taking longer is
// waiting on something other than this process's CPU (a busy or silent API
// server, the probe's timeout) and goes on without a slot, so that with a
// limit a few unreachable clusters never hold up the rest.
//
// A start waiting for a slot is a goroutine parked on a channel that
// leaves as soon as its context ends (a Delete, an Update, the Server
// stopping): nothing ever waits for a slot to stop. A member that runs
// holds none while it stops.
type startGate struct {
	floor int           // slots handed out whatever the run queue
	limit int           // most slots held at once; 0: no limit
	hold  time.Duration // how long a start may keep its slot
	// runnable counts the goroutines waiting for a core (tests replace
	// it); short is the count below which the run queue is short.
	runnable func() int
	short    int

	mu      sync.Mutex
	busy    int // slots held
	waiting startQueue
	grants  uint64      // slots handed to waiting starts, for oldestEvery
	poll    *time.Timer // looks at the run queue again while starts wait
	polling bool
}

// oldestEvery is how often (one grant in oldestEvery) a free slot goes to
// the oldest waiting start rather than to the newest.
const oldestEvery = 4

// pollEvery is how often the run queue is looked at while starts wait. A
// start's CPU work takes a few milliseconds.
const pollEvery = time.Millisecond

// startSlotHold is how long a start keeps its slot at most: its CPU work
// takes milliseconds, so one taking far longer waits on its API server. A
// variable for tests.
var startSlotHold = time.Second

// newStartGate returns a gate that hands out floor slots at once and more
// while fewer than short goroutines wait for a core, limit at most (0: no
// limit); nil (no gate) when limit < 0.
func newStartGate(floor, short, limit int, hold time.Duration) *startGate {
	if limit < 0 {
		return nil
	}
	if limit > 0 {
		floor = min(floor, limit)
	}
	return &startGate{floor: floor, limit: limit, hold: hold, short: short, runnable: runnableGoroutines}
}

// runnableGoroutines is how many goroutines wait for a core right now.
func runnableGoroutines() int {
	s := [1]metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0 // not measured by this runtime: the floor and limit decide
	}
	return int(min(s[0].Value.Uint64(), math.MaxInt32))
}

// startWaiter is one start waiting for a slot, in the gate's queue.
type startWaiter struct {
	prev, next *startWaiter
	granted    chan *startSlot // buffered: the granter never waits
}

// startSlot is a slot held by a start; release gives it back.
type startSlot struct {
	gate  *startGate
	done  atomic.Bool
	timer *time.Timer // gives the slot back after the gate's hold
}

// acquire returns a slot for a start, waiting its turn while the gate
// admits none; queued is called (with no lock held) before it waits, so
// that the member can say it waits. It returns ctx's error, holding no
// slot, if ctx ends first. A nil gate hands out nil slots at once (release
// of nil does nothing).
func (q *startGate) acquire(ctx context.Context, queued func()) (*startSlot, error) {
	if q == nil {
		return nil, ctx.Err()
	}
	q.mu.Lock()
	if err := ctx.Err(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	if q.waiting.empty() && q.admitsLocked(false) {
		q.busy++
		s := q.slotLocked()
		q.mu.Unlock()
		return s, nil
	}
	w := &startWaiter{granted: make(chan *startSlot, 1)}
	q.waiting.pushBack(w)
	q.pollLocked()
	q.mu.Unlock()
	if queued != nil {
		queued()
	}
	select {
	case s := <-w.granted:
		return s, nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	if w.prev != nil { // still waiting: leave the queue
		q.waiting.remove(w)
		q.mu.Unlock()
		return nil, ctx.Err()
	}
	q.mu.Unlock()
	// Granted as ctx ended: the slot goes to the next waiting start.
	(<-w.granted).release()
	return nil, ctx.Err()
}

// admitsLocked reports whether one more slot may be handed out now: under
// the floor always, else within the limit while the run queue is short.
// floorOnly skips the run queue.
func (q *startGate) admitsLocked(floorOnly bool) bool {
	switch {
	case q.busy < q.floor:
		return true
	case floorOnly || q.limit > 0 && q.busy >= q.limit:
		return false
	}
	return q.runnable() < q.short
}

// grantLocked hands free slots to waiting starts: all those the floor
// allows, and one more if the run queue is short (the starts just handed
// a slot are not in it yet: looking again at once would count none of
// them).
func (q *startGate) grantLocked() {
	extra := true
	for !q.waiting.empty() {
		switch {
		case q.admitsLocked(true):
		case extra && q.admitsLocked(false):
			extra = false
		default:
			return
		}
		q.grants++
		var w *startWaiter
		if q.grants%oldestEvery == 0 {
			w = q.waiting.front()
		} else {
			w = q.waiting.back()
		}
		q.waiting.remove(w)
		q.busy++
		w.granted <- q.slotLocked()
	}
}

// pollLocked makes sure the run queue is looked at again soon while
// starts wait: it may drain with no slot freed (starts waiting on the
// network).
func (q *startGate) pollLocked() {
	if q.polling || q.waiting.empty() || q.limit > 0 && q.busy >= q.limit {
		return
	}
	q.polling = true
	if q.poll == nil {
		q.poll = time.AfterFunc(pollEvery, q.onPoll)
	} else {
		q.poll.Reset(pollEvery)
	}
}

func (q *startGate) onPoll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.polling = false
	q.grantLocked()
	q.pollLocked()
}

// slotLocked makes a slot that gives itself back after the gate's hold.
func (q *startGate) slotLocked() *startSlot {
	s := &startSlot{gate: q}
	if q.hold > 0 {
		s.timer = time.AfterFunc(q.hold, s.giveBack)
	}
	return s
}

// release gives the slot back, handing it to a waiting start if the gate
// admits one. Only the first call (or the hold's expiry) counts; a nil
// slot does nothing. Called by the start that holds it.
func (s *startSlot) release() {
	if s == nil {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.giveBack()
}

func (s *startSlot) giveBack() {
	if !s.done.CompareAndSwap(false, true) {
		return
	}
	q := s.gate
	q.mu.Lock()
	defer q.mu.Unlock()
	q.busy--
	q.grantLocked()
	q.pollLocked()
}

// stats reports the slots held and the starts waiting, for tests.
func (q *startGate) stats() (busy, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy, q.waiting.n
}

// startQueue is the waiting starts in the order they came: a list linked
// through the waiters themselves, so that one leaving from the middle (its
// member deleted) costs no search.
type startQueue struct {
	root startWaiter // root.next is the oldest, root.prev the newest
	n    int
}

func (l *startQueue) empty() bool { return l.n == 0 }

func (l *startQueue) front() *startWaiter { return l.root.next }

func (l *startQueue) back() *startWaiter { return l.root.prev }

func (l *startQueue) pushBack(w *startWaiter) {
	if l.root.next == nil {
		l.root.next, l.root.prev = &l.root, &l.root
	}
	last := l.root.prev
	w.prev, w.next = last, &l.root
	last.next = w
	l.root.prev = w
	l.n++
}

// remove takes w out of the queue; w.prev is nil from then on.
func (l *startQueue) remove(w *startWaiter) {
	w.prev.next = w.next
	w.next.prev = w.prev
	w.prev, w.next = nil, nil
	l.n--
}
