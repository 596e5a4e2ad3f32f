package leaninformer

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
// in the calling goroutine, then every event after them.
//
// Resync periods follow client-go: at least a second; before the informer
// starts a shorter period than the informer's shortens the informer's
// check period, after it starts it is raised to that period; none when
// the informer does not resync.
func (i *Informer) AddEventHandlerWithOptions(handler toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	logger := ptr.Deref(opts.Logger, klog.Background())
	i.mu.Lock()
	if i.stopped {
		i.mu.Unlock()
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
		upstream:  i.hasSynced,
		replayed:  !i.started,
	}
	joining := i.started
	r.joining.Store(joining)
	r.nextResync = i.clock.Now().Add(r.resync)
	r.syncing.Store(true) // as client-go's: until the first resync check
	var replay []any
	if joining {
		replay = i.indexer.List()
	}
	i.handlers = append(slices.Clip(i.handlers), r)
	i.mu.Unlock()

	if joining {
		r.join(replay)
	} else {
		r.mu.Lock()
		r.closeIfSyncedLocked()
		r.mu.Unlock()
	}
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
// being delivered after this returns.
func (i *Informer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*registration)
	if !ok || r.informer != i {
		return fmt.Errorf("registration %v is not of this informer", handle)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	r.removed.Store(true)
	i.handlers = slices.DeleteFunc(slices.Clone(i.handlers), func(o *registration) bool { return o == r })
	return nil
}

// shouldResync marks the handlers whose resync is due as syncing and
// reports whether there are any; the reflector asks before each resync.
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

// registration is one handler of an informer.
type registration struct {
	informer *Informer
	handler  toolscache.ResourceEventHandler

	// Guarded by informer.mu.
	requested, resync time.Duration
	nextResync        time.Time

	syncing atomic.Bool // its resync is due: it gets updates that change nothing
	removed atomic.Bool
	joining atomic.Bool // it replays the store; events wait in pending (set under mu)

	mu       sync.Mutex
	pending  []event // events that came while it replayed
	upstream bool    // the informer has synced
	replayed bool    // it has seen what the store held when it joined
	synced   chan struct{}
}

var _ toolscache.ResourceEventHandlerRegistration = (*registration)(nil)

// HasSynced reports whether the informer has synced and the handler has
// seen the initial list.
func (r *registration) HasSynced() bool { return isClosed(r.synced) }

// HasSyncedChecker is done once HasSynced is true.
func (r *registration) HasSyncedChecker() toolscache.DoneChecker {
	return doneChecker{name: fmt.Sprintf("handler of SharedIndexInformer %T", r.informer.example), done: r.synced}
}

// join replays what the store held when the handler was added, then the
// events that came meanwhile, until none are left; from then on events
// reach the handler directly.
func (r *registration) join(replay []any) {
	for _, obj := range replay {
		if r.removed.Load() {
			break
		}
		r.handler.OnAdd(obj, true)
	}
	for {
		r.mu.Lock()
		pending := r.pending
		r.pending = nil
		if len(pending) == 0 {
			r.joining.Store(false)
			r.replayed = true
			r.closeIfSyncedLocked()
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		for _, e := range pending {
			if !r.removed.Load() {
				e.to(r.handler)
			}
		}
	}
}

// upstreamSynced records that the informer has synced.
func (r *registration) upstreamSynced() {
	r.mu.Lock()
	r.upstream = true
	r.closeIfSyncedLocked()
	r.mu.Unlock()
}

func (r *registration) closeIfSyncedLocked() {
	if r.upstream && r.replayed && !r.HasSynced() {
		close(r.synced)
	}
}

// deliver hands e to the handler, or keeps it for join while the handler
// replays.
func (r *registration) deliver(e event) {
	if r.removed.Load() {
		return
	}
	if r.joining.Load() {
		r.mu.Lock()
		if r.joining.Load() {
			r.pending = append(r.pending, e)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
	e.to(r.handler)
}

type eventType uint8

const (
	added eventType = iota
	updated
	deleted
)

// event is one notification for a handler.
type event struct {
	typ     eventType
	initial bool // an add in the initial list
	old     any
	obj     any
}

func (e event) to(h toolscache.ResourceEventHandler) {
	switch e.typ {
	case added:
		h.OnAdd(e.obj, e.initial)
	case updated:
		h.OnUpdate(e.old, e.obj)
	case deleted:
		h.OnDelete(e.obj)
	}
}
