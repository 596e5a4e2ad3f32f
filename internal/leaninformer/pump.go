package leaninformer

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// pumpCapacity is how many informers a pump serves before another pump
// starts. A pump's work per event, start or resync is the same whatever
// number of informers it serves: everything reaches it through its inbox,
// in the order it came, and a watch has at most one event there at a time;
// stops go ahead of the inbox (see pump.stop). Only backoffs look at all of its
// informers: each time the backoff timer fires, for those whose retry is
// due and the next retry. What reaches the inbox at once (a start) waits
// behind what the other informers posted before, and with a thousand at
// most that stays well under a millisecond.
//
// The number of pumps follows the number of informers only: a hundred
// clusters on ten kinds run on one pump, as on one kind, whatever the
// number of cores, so a further kind costs a cluster its watch and no
// share of a pump. A pump's work is light next to the decoding, which the
// readers of the watch streams do, in goroutines of their own.
const pumpCapacity = 1024

// pumps are the pumps running in the process.
var pumps = &pool{capacity: pumpCapacity}

// pool is a set of pumps (tests make pools of their own).
type pool struct {
	capacity int

	mu    sync.Mutex
	pumps []*pump
}

// assign hands a started informer to the first pump of its pool with fewer
// than capacity informers, or to a new one.
func assign(i *Informer) {
	pl := i.pool
	pl.mu.Lock()
	var p *pump
	for _, q := range pl.pumps {
		if q.assigned < pl.capacity {
			p = q
			break
		}
	}
	if p == nil {
		p = &pump{pool: pl, wake: make(chan struct{}, 1), informers: map[*Informer]struct{}{}}
		pl.pumps = append(pl.pumps, p)
		go p.loop()
	}
	p.assigned++
	i.run.pump = p
	pl.mu.Unlock()
	p.post(message{kind: msgStart, informer: i})
}

// retire ends p if no informer is assigned to it, and reports whether it
// did: an informer assigned meanwhile has its start message on its way.
func (p *pump) retire() bool {
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	if p.assigned > 0 {
		return false
	}
	p.pool.pumps = slices.DeleteFunc(p.pool.pumps, func(q *pump) bool { return q == p })
	return true
}

// release forgets i: another informer may take its place.
func (p *pump) release(i *Informer) {
	delete(p.informers, i)
	p.pool.mu.Lock()
	p.assigned--
	p.pool.mu.Unlock()
	close(i.released)
}

// pump is a goroutine that watches for many informers: it takes their
// watches' events, stores what they report and queues it for their
// handlers, and runs their resync checks and backoffs. All of it reaches
// the pump as messages in its inbox: a watch hands over one event and
// reads the next only once the pump has taken it (follow), and the timers
// post when they fire. Lists and the opening of watches are requests that
// may take a while: they run in goroutines of their own, which hand the
// outcome back (connect). No handler code runs in a pump: handlers are
// called from their own delivery goroutines.
//
// Since a watch has at most one event in the inbox at a time, a burst on
// one informer's watch holds up another's next event by at most one event
// of each watch. Stops go ahead of the inbox (see stop).
//
// A pump ends once it has no informer left.
type pump struct {
	pool *pool
	// assigned counts the informers handed to the pump and not yet
	// released; guarded by pool.mu.
	assigned int

	mu    sync.Mutex
	inbox []message
	// stops are the informers whose stop was posted (stop), handled
	// ahead of the inbox; stopping says there are some.
	stops    []*Informer
	stopping atomic.Bool
	wake     chan struct{} // signalled when inbox or stops get something

	// The pump's own.
	informers  map[*Informer]struct{}
	spare      []message   // the inbox before last, for the next to reuse
	backoff    *time.Timer // fires at the earliest retry of an informer
	backoffAt  time.Time
	backoffSeq uint64 // counts backoff timers, so that one replaced is ignored
}

type msgKind uint8

const (
	msgStart     msgKind = iota // an informer starts
	msgConnected                // a list and the opening of a watch are done
	msgEvent                    // a watch's next event, or its end
	msgResync                   // an informer's resync timer fired
	msgBackoff                  // the backoff timer fired
	msgCall                     // call is called in the pump (tests)
)

type message struct {
	kind     msgKind
	informer *Informer
	result   connectResult
	// A watch's event (msgEvent): the watch it came from, and the event,
	// or ended when the watch has ended.
	watch followedWatch
	event watch.Event
	ended bool
	// seq tells the timer of a msgResync or msgBackoff from one that
	// replaced it.
	seq  uint64
	call func()
}

// post hands m to the pump; it never waits.
func (p *pump) post(m message) {
	p.mu.Lock()
	p.inbox = append(p.inbox, m)
	p.mu.Unlock()
	p.signal()
}

// stop tells the pump that i's context has ended; it never waits.
//
// A stop goes ahead of the inbox: a member's Delete waits for its
// informers to stop (Runner.Stop), and a pump taking a fleet's start may
// have a thousand starts and events in its inbox. A stop handled before
// messages posted earlier for the same informer loses nothing: a start
// finds the informer's context ended and stops it; a list's outcome, an
// event or a timer of a stopped informer is dropped.
func (p *pump) stop(i *Informer) {
	p.mu.Lock()
	p.stops = append(p.stops, i)
	p.stopping.Store(true)
	p.mu.Unlock()
	p.signal()
}

func (p *pump) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pump) loop() {
	defer utilruntime.HandleCrash()
	for {
		p.handleInbox()
		if len(p.informers) == 0 && p.retire() {
			if p.backoff != nil {
				p.backoff.Stop()
			}
			return
		}
		p.shrink()
		<-p.wake
	}
}

// keptMessages is the most messages the inbox's buffers keep room for
// while the pump waits.
const keptMessages = 64

// shrink lets go of the inbox's buffers where they grew past
// keptMessages, once the pump has nothing left to do: a fleet's start posts
// a start and a list's outcome per informer, and buffers kept at that size
// would hold some 350 bytes per informer (two buffers of 176-byte
// messages) for as long as the pump runs, idle. While messages wait, the
// buffers are in use, and kept.
func (p *pump) shrink() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.inbox) > 0 {
		return
	}
	if cap(p.inbox) > keptMessages {
		p.inbox = nil
	}
	if cap(p.spare) > keptMessages {
		p.spare = nil
	}
}

// handleInbox handles the messages posted since it last looked.
func (p *pump) handleInbox() {
	p.handleStops()
	p.mu.Lock()
	msgs := p.inbox
	p.inbox = p.spare
	p.mu.Unlock()
	for _, m := range msgs {
		p.handleStops()
		p.handle(m)
	}
	clear(msgs) // let go of the events and informers they hold
	p.spare = msgs[:0]
}

// handleStops handles the stops posted since it last looked, if any. A
// stop posted before the informer's start, or after the informer was let
// go, finds it absent: its start sees the stop.
func (p *pump) handleStops() {
	if !p.stopping.Load() {
		return // none: no lock taken
	}
	p.mu.Lock()
	stops := p.stops
	p.stops = nil
	p.stopping.Store(false)
	p.mu.Unlock()
	for _, i := range stops {
		if _, ok := p.informers[i]; ok {
			i.run.stopRequested()
		}
	}
}

func (p *pump) handle(m message) {
	switch m.kind {
	case msgBackoff:
		if m.seq == p.backoffSeq {
			p.backoffAt = time.Time{}
			p.retryDue()
		}
	case msgCall:
		m.call()
	case msgStart:
		p.informers[m.informer] = struct{}{}
		m.informer.run.start()
	case msgConnected:
		m.informer.run.connected(m.result)
	case msgEvent:
		p.event(m)
	case msgResync:
		if st := m.informer.run; st.resync != nil && m.seq == st.resyncSeq {
			st.resyncDue()
		}
	}
}

// event takes a watch's event, or its end, and asks for the next event.
// An event of a watch stopped since (or of an informer let go) is dropped:
// the watch reads no more.
func (p *pump) event(m message) {
	st := m.informer.run
	if st.w != m.watch {
		return
	}
	if m.ended {
		st.watchEnded(nil)
		return
	}
	st.handle(m.event)
	if st.w == m.watch { // the event did not end the watch
		m.watch.next()
	}
}

// retryLater schedules st's next attempt after its backoff.
func (p *pump) retryLater(st *runState, relist bool) {
	st.phase = phaseBackoff
	st.relist = relist
	if relist {
		st.stopResync() // as client-go's reflector: checks start anew after the list
	}
	st.retryAt = time.Now().Add(st.nextDelay())
	if p.backoffAt.IsZero() || st.retryAt.Before(p.backoffAt) {
		p.setBackoff(st.retryAt)
	}
}

// armBackoff sets the backoff timer to the earliest retry.
func (p *pump) armBackoff() {
	var next time.Time
	for i := range p.informers {
		if st := i.run; st.phase == phaseBackoff && (next.IsZero() || st.retryAt.Before(next)) {
			next = st.retryAt
		}
	}
	if !next.Equal(p.backoffAt) {
		p.setBackoff(next)
	}
}

// setBackoff sets the backoff timer to fire at next (never, if zero).
func (p *pump) setBackoff(next time.Time) {
	p.backoffAt = next
	p.backoffSeq++
	if p.backoff != nil {
		p.backoff.Stop()
		p.backoff = nil
	}
	if next.IsZero() {
		return
	}
	seq := p.backoffSeq
	p.backoff = time.AfterFunc(time.Until(next), func() { p.post(message{kind: msgBackoff, seq: seq}) })
}

// retryDue starts the attempts whose backoff has passed.
func (p *pump) retryDue() {
	now := time.Now()
	for i := range p.informers {
		if st := i.run; st.phase == phaseBackoff && !st.retryAt.After(now) {
			st.connect(st.relist)
		}
	}
	p.armBackoff()
}
