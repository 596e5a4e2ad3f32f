package leaninformer

import (
	"reflect"
	"slices"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// pumpCapacity is how many informers one pump serves. A pump wakes for
// every event of any of its informers and hands reflect.Select up to two
// cases per informer (its watch and its resync timer), so each wake costs
// time in proportion to the informers it serves (reflect.Select locks
// every channel it is handed), and a burst on one delays the others by
// up to a batch each: 64 keeps that small while a fleet of single-kind
// members pays a sixty-fourth of a goroutine each.
const pumpCapacity = 64

// eventBatch is how many events of one watch a pump takes in a row when
// they are ready, before it looks at its other informers again.
const eventBatch = 32

// pumps are the pumps running in the process, each with room for
// pumpCapacity informers.
var pumps = &pool{capacity: pumpCapacity}

// pool is a set of pumps (tests make pools of their own).
type pool struct {
	capacity int

	mu    sync.Mutex
	pumps []*pump
}

// assign hands a started informer to a pump of its pool with room,
// starting one if none has any.
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
		p = &pump{pool: pl, wake: make(chan struct{}, 1), informers: map[*Informer]struct{}{}, dirty: true}
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
	p.dirty = true
	p.pool.mu.Lock()
	p.assigned--
	p.pool.mu.Unlock()
	close(i.released)
}

// pump is a goroutine that watches for many informers: it receives from
// their watches, stores what they report and queues it for their handlers,
// and runs their resync checks and backoffs. Lists and the opening of
// watches are requests that may take a while: they run in goroutines of
// their own, which hand the outcome back (connect). No handler code runs
// in a pump: handlers are called from their own delivery goroutines.
//
// A pump ends once it has no informer left.
type pump struct {
	pool *pool
	// assigned counts the informers handed to the pump and not yet
	// released; guarded by pool.mu.
	assigned int

	mu    sync.Mutex
	inbox []message
	wake  chan struct{} // signalled when inbox gets a message

	// The pump's own.
	informers map[*Informer]struct{}
	backoff   *time.Timer // fires at the earliest retry of an informer
	backoffAt time.Time
	cases     []reflect.SelectCase
	owners    []caseOwner
	dirty     bool // cases must be rebuilt
}

type msgKind uint8

const (
	msgStart     msgKind = iota // an informer starts
	msgStop                     // an informer's context has ended
	msgConnected                // a list and the opening of a watch are done
)

type message struct {
	kind     msgKind
	informer *Informer
	result   connectResult
}

// post hands m to the pump; it never waits.
func (p *pump) post(m message) {
	p.mu.Lock()
	p.inbox = append(p.inbox, m)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

type caseKind uint8

const (
	caseWake caseKind = iota
	caseBackoff
	caseWatch
	caseResync
)

type caseOwner struct {
	kind     caseKind
	informer *Informer
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
		if p.dirty {
			p.rebuild()
		}
		chosen, value, ok := reflect.Select(p.cases)
		owner := p.owners[chosen]
		switch owner.kind {
		case caseWake:
		case caseBackoff:
			p.backoffAt = time.Time{}
			p.retryDue()
		case caseWatch:
			st := owner.informer.run
			w := st.w
			if !ok {
				st.watchEnded(nil)
				break
			}
			st.handle(value.Interface().(watch.Event))
			st.drain(w)
		case caseResync:
			owner.informer.run.resyncDue()
		}
	}
}

// handleInbox handles the messages posted since it last looked.
func (p *pump) handleInbox() {
	p.mu.Lock()
	msgs := p.inbox
	p.inbox = nil
	p.mu.Unlock()
	for _, m := range msgs {
		st := m.informer.run
		switch m.kind {
		case msgStart:
			p.informers[m.informer] = struct{}{}
			st.start()
		case msgStop:
			// A stop posted before the start, or after the informer was
			// let go, finds it absent: its start sees the stop.
			if _, ok := p.informers[m.informer]; ok {
				st.stopRequested()
			}
		case msgConnected:
			st.connected(m.result)
		}
	}
}

// rebuild lays out the select cases: the inbox, the backoff timer, then
// each informer's watch and resync timer, if it has them.
func (p *pump) rebuild() {
	p.dirty = false
	p.cases = p.cases[:0]
	p.owners = p.owners[:0]
	add := func(ch any, owner caseOwner) {
		p.cases = append(p.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		p.owners = append(p.owners, owner)
	}
	add(p.wake, caseOwner{kind: caseWake})
	var backoff <-chan time.Time
	if p.backoff != nil && !p.backoffAt.IsZero() {
		backoff = p.backoff.C
	}
	add(backoff, caseOwner{kind: caseBackoff})
	for i := range p.informers {
		st := i.run
		if st.w != nil {
			add(st.w.ResultChan(), caseOwner{kind: caseWatch, informer: i})
		}
		if st.resync != nil {
			add(st.resync.C(), caseOwner{kind: caseResync, informer: i})
		}
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
	p.armBackoff()
}

// armBackoff sets the backoff timer to the earliest retry.
func (p *pump) armBackoff() {
	var next time.Time
	for i := range p.informers {
		if st := i.run; st.phase == phaseBackoff && (next.IsZero() || st.retryAt.Before(next)) {
			next = st.retryAt
		}
	}
	if next.Equal(p.backoffAt) {
		return
	}
	p.dirty = true
	p.backoffAt = next
	if next.IsZero() {
		if p.backoff != nil {
			p.backoff.Stop()
		}
		return
	}
	if p.backoff == nil {
		p.backoff = time.NewTimer(time.Until(next))
	} else {
		p.backoff.Reset(time.Until(next))
	}
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
