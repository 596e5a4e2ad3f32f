package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mccr-dev/mccr/internal/schedwait"
)

// startGate bounds how many members' starts are in their CPU-heavy part
// at once: the reachability check (dial, TLS handshake), building the
// Manager and running setups, and the initial lists up to synced caches.
// Options.MaxConcurrentStarts sets the bound (8 per core by default; a
// negative value leaves the gate out, and a fleet registered at once
// starts every member together). What the bound buys is memory at rest
// (members started together leave their long-lived goroutines' stacks
// scattered over many stack spans) and latency for a member added during
// a mass registration: it waits for a few starts, not for all of them.
//
// A start holds one of limit slots while it runs; a freed slot goes to a
// waiting start at once.
//
// Order. The newest waiting start gets a free slot first, so that a member
// added while a large backlog waits (one more cluster joining during a
// mass registration or a restart of the fleet) starts after about limit
// starts, not after the backlog. So that newest-first starves nothing,
// every oldestEvery-th slot goes to the oldest waiting start instead: the
// oldest always makes progress, whatever keeps arriving.
//
// A start keeps its slot until its caches have synced, it ends, or it has
// held the slot for hold, whichever comes first: a start taking longer is
// waiting on something other than this process's CPU (a busy or silent API
// server, the probe's timeout) and goes on without a slot, so that a few
// unreachable clusters never hold up the rest.
//
// The first part of a start, its reachability check (a dial, a TLS
// handshake, one request), keeps the slot for checkHold only, unless this
// process's goroutines are waiting for a CPU (schedwait): a check still
// without an answer then, while the cores have time to spare, is waiting
// on the network, for an API server far away (every round trip tens of
// milliseconds) or not answering, and the start goes on without a slot.
// Otherwise a fleet of far clusters would start no faster than the
// bound's starts' round trips allow (500 clusters 50 ms away: 6.5 s, where
// unbounded starts took 3.8 s), however idle the cores. While goroutines
// wait for a CPU, a slow check is slow for want of one, as every start
// is: the start keeps its slot (asking again every checkHold, up to the
// hold), so that the bound holds exactly when the cores are busy.
//
// A start waiting for a slot is a goroutine parked on a channel that
// leaves as soon as its context ends (a Delete, an Update, the Server
// stopping): nothing ever waits for a slot to stop. A member that runs
// holds none while it stops.
type startGate struct {
	limit     int           // most slots held at once
	hold      time.Duration // how long a start may keep its slot; 0: until released
	checkHold time.Duration // how long, until its check has answered (checked)
	cpuBusy   func() bool   // whether goroutines wait for a CPU (cpuWaiting)

	mu      sync.Mutex
	busy    int // slots held
	waiting startQueue
	grants  uint64 // slots handed to waiting starts, for oldestEvery
}

// oldestEvery is how often (one grant in oldestEvery) a free slot goes to
// the oldest waiting start rather than to the newest.
const oldestEvery = 4

// startSlotHold is how long a start keeps its slot at most: its CPU work
// takes milliseconds, so one taking far longer waits on its API server. A
// variable for tests.
var startSlotHold = time.Second

// startCheckHold is how long a start keeps its slot before its
// reachability check has answered: a near API server answers a check in a
// few milliseconds (tens, with the bound's starts sharing two busy cores),
// a far one takes three round trips. A variable for tests.
var startCheckHold = 50 * time.Millisecond

// newStartGate returns a gate of limit slots, each held for hold at most,
// and for checkHold until its start's check has answered (0: hold); nil
// (no gate: every start begins at once) when limit is not positive.
func newStartGate(limit int, hold, checkHold time.Duration) *startGate {
	if limit <= 0 {
		return nil
	}
	if checkHold <= 0 || hold > 0 && checkHold > hold {
		checkHold = hold
	}
	return &startGate{limit: limit, hold: hold, checkHold: checkHold, cpuBusy: cpuBusy}
}

// cpuWaiting tells the gates whether this process's goroutines wait for a
// CPU: one for the process, whose readings every gate shares. Its default
// threshold counts cores that other processes keep busy as busy: API
// servers on the same machine answering slowly for want of a CPU are no
// reason to start more members at once. (With 100 clusters on ten kinds
// started at once, a threshold of 1ms gave a slot back to starts that
// waited on such API servers: 666-677 KiB per idle cluster, against
// 614-649 with 200µs and 610-654 with slots held through the check.)
var cpuWaiting schedwait.Gauge

// cpuBusy is what new gates ask: cpuWaiting, or a test's stand-in.
var cpuBusy = cpuWaiting.Waiting

// startWaiter is one start waiting for a slot, in the gate's queue.
type startWaiter struct {
	prev, next *startWaiter
	granted    chan *startSlot // buffered: the granter never waits
}

// startSlot is a slot held by a start; release gives it back.
type startSlot struct {
	gate  *startGate
	taken time.Time
	done  atomic.Bool
	timer *time.Timer // runs expire: after the gate's checkHold, then hold

	mu       sync.Mutex // orders checked and expire
	answered bool       // the start's check has answered
}

// acquire returns a slot for a start, waiting its turn while all are
// held; queued is called (with no lock held) before it waits, so that the
// member can say it waits. It returns ctx's error, holding no slot, if ctx
// ends first. A nil gate hands out nil slots at once (release of nil does
// nothing).
func (q *startGate) acquire(ctx context.Context, queued func()) (*startSlot, error) {
	if q == nil {
		return nil, ctx.Err()
	}
	q.mu.Lock()
	if err := ctx.Err(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	if q.waiting.empty() && q.busy < q.limit {
		q.busy++
		s := q.slotLocked()
		q.mu.Unlock()
		q.askCPU()
		return s, nil
	}
	w := &startWaiter{granted: make(chan *startSlot, 1)}
	q.waiting.pushBack(w)
	q.mu.Unlock()
	if queued != nil {
		queued()
	}
	select {
	case s := <-w.granted:
		q.askCPU()
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

// askCPU asks, as a slot is taken, whether goroutines wait for a CPU,
// for the question's sake: a Gauge that nothing asked for a while starts
// a new window with the question, so that the slot's first look, a
// checkHold later, judges that window rather than a fresh one (which
// says "not waiting" whatever the cores are doing).
func (q *startGate) askCPU() {
	if q.cpuBusy != nil {
		q.cpuBusy()
	}
}

// grantLocked hands free slots to waiting starts: the newest first, the
// oldest every oldestEvery-th grant.
func (q *startGate) grantLocked() {
	for !q.waiting.empty() && q.busy < q.limit {
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

// slotLocked makes a slot whose timer looks at it after the gate's
// checkHold (see expire).
func (q *startGate) slotLocked() *startSlot {
	s := &startSlot{gate: q, taken: time.Now()}
	if q.checkHold > 0 {
		s.mu.Lock() // expire reads the timer under it
		s.timer = time.AfterFunc(q.checkHold, s.expire)
		s.mu.Unlock()
	}
	return s
}

// checked tells the slot that its start's reachability check has
// answered: a slot still held is kept for the rest of the gate's hold,
// counted from when it was taken. Called by the start that holds it,
// before release; a nil slot does nothing.
func (s *startSlot) checked() {
	if s == nil || s.timer == nil {
		return
	}
	s.mu.Lock()
	s.answered = true
	// Stop fails once the timer has fired: expire has given the slot
	// back, or runs and finds it answered. A timer stopped after the hold
	// was over (it runs late on busy cores) leaves the give-back to here.
	keep := !s.timer.Stop() || s.rearmLocked()
	s.mu.Unlock()
	if !keep {
		s.giveBack()
	}
}

// expire runs on the slot's timer: it gives the slot back, unless the
// start's check has answered and the hold is not over, or the check has
// not but goroutines wait for a CPU (then it looks again after checkHold,
// the hold allowing).
func (s *startSlot) expire() {
	if s.done.Load() {
		return
	}
	s.mu.Lock()
	keep := s.answered || s.gate.cpuBusy != nil && s.gate.cpuBusy()
	if s.done.Load() {
		// Released meanwhile: no look after this one (release stops the
		// timer under mu, so a timer armed before this is stopped).
		s.mu.Unlock()
		return
	}
	if keep && s.rearmLocked() {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.giveBack()
}

// rearmLocked sets the timer for the slot's next look, and reports whether
// the slot is still to be held: until the hold is over once its check
// has answered (forever with no hold), or for checkHold more before.
func (s *startSlot) rearmLocked() bool {
	q := s.gate
	next := q.checkHold
	if s.answered {
		if q.hold <= 0 {
			return true // until released
		}
		next = q.hold
	}
	if q.hold > 0 {
		next = min(next, time.Until(s.taken.Add(q.hold)))
	}
	if next <= 0 {
		return false
	}
	s.timer.Reset(next)
	return true
}

// release gives the slot back, handing it to a waiting start if one
// waits, and stops its timer. Only the first call (or the hold's expiry)
// counts; a nil slot does nothing. Called by the start that holds it.
func (s *startSlot) release() {
	if s == nil {
		return
	}
	s.giveBack()
	if s.timer != nil {
		// Under mu: an expire looking meanwhile either armed the timer
		// before (stopped here) or finds the slot done after.
		s.mu.Lock()
		s.timer.Stop()
		s.mu.Unlock()
	}
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
}

// backlogged says whether starts wait for a slot: the bound holds back
// members of the fleet (a mass registration, a restart of the fleet). A
// nil gate holds back none.
func (q *startGate) backlogged() bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.waiting.empty()
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
