package leaninformer

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// AddEventHandler adds a handler with the informer's default resync period.
func (i *Informer) AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(handler, toolscache.HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod adds a handler with a resync period of
// its own.
func (i *Informer) AddEventHandlerWithResyncPeriod(handler toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(handler, toolscache.HandlerOptions{ResyncPeriod: &resync})
}

// AddEventHandlerWithOptions adds a handler. Added to a running informer,
// it is first handed the objects in the store as adds in the initial list,
// then every event after them, in its own delivery goroutine.
//
// Resync periods follow client-go: at least a second; before the informer
// starts a shorter period than the informer's shortens the informer's
// check period, after it starts it is raised to that period; none when
// the informer does not resync.
func (i *Informer) AddEventHandlerWithOptions(handler toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	logger := ptr.Deref(opts.Logger, klog.Background())
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped {
		return nil, fmt.Errorf("adding handler %v: %w", handler, ErrStopped)
	}
	requested := ptr.Deref(opts.ResyncPeriod, i.defaultResync)
	if requested > 0 && requested < minimumResyncPeriod {
		logger.Info("Warning: resync period is too small. Changing it to the minimum allowed value", "resyncPeriod", requested, "minimumResyncPeriod", minimumResyncPeriod)
		requested = minimumResyncPeriod
	}
	if requested > 0 && requested < i.resyncCheck {
		if i.started {
			logger.Info("Warning: resync period is smaller than resync check period and the informer has already started. Changing it to the resync check period", "resyncPeriod", requested, "resyncCheckPeriod", i.resyncCheck)
			requested = i.resyncCheck
		} else {
			i.resyncCheck = requested
			for _, r := range i.handlers {
				r.resync = effectiveResync(r.requested, requested)
			}
		}
	}
	r := &registration{
		informer:  i,
		handler:   handler,
		requested: requested,
		resync:    effectiveResync(requested, i.resyncCheck),
		synced:    make(chan struct{}),
	}
	r.nextResync = i.clock.Now().Add(r.resync)
	r.syncing.Store(true) // as client-go's: until the first resync check
	if i.started {
		// Queued under mu, which every change of the store holds: what the
		// handler misses here it gets as an event, and nothing twice.
		replay := i.indexer.List()
		events := make([]event, len(replay), len(replay)+1)
		for n, obj := range replay {
			events[n] = event{typ: added, obj: obj, initial: true}
		}
		if i.hasSynced {
			events = append(events, event{typ: listed})
		}
		r.queue(events...)
	}
	i.handlers = append(slices.Clip(i.handlers), r)
	return r, nil
}

// effectiveResync is a handler's resync period given the informer's check
// period, as client-go's determineResyncPeriod.
func effectiveResync(requested, check time.Duration) time.Duration {
	switch {
	case requested == 0 || check == 0:
		return 0
	case requested < check:
		return check
	default:
		return requested
	}
}

// RemoveEventHandler removes a handler: it gets no event that starts
// being delivered after this returns, and what was queued for it is
// dropped.
func (i *Informer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*registration)
	if !ok || r.informer != i {
		return fmt.Errorf("registration %v is not of this informer", handle)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	r.removed.Store(true)
	r.mu.Lock()
	r.pending = nil
	r.mu.Unlock()
	i.handlers = slices.DeleteFunc(slices.Clone(i.handlers), func(o *registration) bool { return o == r })
	return nil
}

// shouldResync marks the handlers whose resync is due as syncing and
// reports whether there are any; the pump asks at each resync check.
func (i *Informer) shouldResync() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	now := i.clock.Now()
	due := false
	for _, r := range i.handlers {
		mine := r.resync > 0 && !now.Before(r.nextResync)
		if mine {
			r.nextResync = now.Add(r.resync)
			due = true
		}
		r.syncing.Store(mine)
	}
	return due
}

// deliveries keeps count of the informer's delivery goroutines, so that
// its stop can wait for them.
type deliveries struct {
	mu      sync.Mutex
	halted  bool // the informer has stopped: no delivery starts
	running sync.WaitGroup
	active  atomic.Int32 // running's count, for idle
	done    atomic.Bool  // halted, read by deliveries under way
}

// begin reports whether a delivery goroutine may start, counting it.
func (d *deliveries) begin() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.halted {
		return false
	}
	d.running.Add(1)
	d.active.Add(1)
	return true
}

// end counts a delivery goroutine out.
func (d *deliveries) end() {
	d.active.Add(-1)
	d.running.Done()
}

// halt makes the deliveries drop what they hold once their handler call
// under way returns, and starts no other.
func (d *deliveries) halt() {
	d.mu.Lock()
	d.halted = true
	d.done.Store(true)
	d.mu.Unlock()
}

// wait waits for the deliveries under way to end, once halted.
func (d *deliveries) wait() { d.running.Wait() }

// idle reports whether no delivery goroutine runs.
func (d *deliveries) idle() bool { return d.active.Load() == 0 }

// registration is one handler of an informer, with the events not yet
// handed to it.
//
// Each registration is delivered to by a goroutine of its own, started
// when an event is queued for it and ended when its queue is empty: a
// handler that takes its time holds up neither the watch (and so the
// store) nor the informer's other handlers, and an idle handler costs no
// goroutine. Its queue is unbounded, as client-go's per-handler buffer
// is: bounding it would make the watch wait for the slowest handler.
type registration struct {
	informer *Informer
	handler  toolscache.ResourceEventHandler

	// Guarded by informer.mu.
	requested, resync time.Duration
	nextResync        time.Time

	syncing atomic.Bool // its resync is due: it gets updates that change nothing
	removed atomic.Bool

	mu         sync.Mutex
	pending    []event // queued, in order
	delivering bool    // a goroutine hands pending to the handler
	synced     chan struct{}
}

var _ toolscache.ResourceEventHandlerRegistration = (*registration)(nil)

// HasSynced reports whether the informer has synced and the handler has
// been handed the initial list.
func (r *registration) HasSynced() bool { return isClosed(r.synced) }

// HasSyncedChecker is done once HasSynced is true.
func (r *registration) HasSyncedChecker() toolscache.DoneChecker {
	return (*handlerSyncChecker)(r)
}

// handlerSyncChecker is a registration's sync checker, named only when
// asked (see Informer.HasSyncedChecker).
type handlerSyncChecker registration

func (c *handlerSyncChecker) Name() string {
	return fmt.Sprintf("handler of SharedIndexInformer %T", c.informer.example)
}
func (c *handlerSyncChecker) Done() <-chan struct{} { return c.synced }

// upstreamSynced queues, after the initial list, the mark that the handler
// has been handed it.
func (r *registration) upstreamSynced() { r.queue(event{typ: listed}) }

// deliver queues e for the handler.
func (r *registration) deliver(e event) { r.queue(e) }

// queue appends events to the handler's queue and starts its delivery
// goroutine if none runs.
func (r *registration) queue(events ...event) {
	if len(events) == 0 || r.removed.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removed.Load() {
		return
	}
	r.pending = append(r.pending, events...)
	if r.delivering || !r.informer.deliveries.begin() {
		return
	}
	r.delivering = true
	go r.run()
}

// run hands the queued events to the handler, one at a time, until none
// is left, the handler is removed or the informer stops.
func (r *registration) run() {
	d := &r.informer.deliveries
	defer d.end()
	defer utilruntime.HandleCrash()
	for {
		r.mu.Lock()
		batch := r.pending
		r.pending = nil
		if len(batch) == 0 || r.removed.Load() || d.done.Load() {
			r.delivering = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		for n := range batch {
			if r.removed.Load() || d.done.Load() {
				break
			}
			e := batch[n]
			batch[n] = event{} // the handler may be slow: let go of what it was handed
			r.handle(e)
		}
	}
}

// handle hands e to the handler, or records that the handler has been
// handed the initial list.
func (r *registration) handle(e event) {
	switch e.typ {
	case added:
		r.handler.OnAdd(e.obj, e.initial)
	case updated:
		r.handler.OnUpdate(e.old, e.obj)
	case deleted:
		r.handler.OnDelete(e.obj)
	case listed:
		if !r.HasSynced() { // only this registration's delivery closes it
			close(r.synced)
		}
	}
}

type eventType uint8

const (
	added eventType = iota
	updated
	deleted
	listed // the initial list has been handed over
)

// event is one notification for a handler.
type event struct {
	typ     eventType
	initial bool // an add in the initial list
	old     any
	obj     any
}
