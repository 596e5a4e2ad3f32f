package member

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// Informers of a member end their sync wait with the member.
//
// client-go closes an informer's HasSyncedChecker channel when it has
// synced, and never when it stops first. controller-runtime's
// namespace-restricted cache (DefaultNamespaces) starts a goroutine per
// informer and per event handler that waits on exactly that channel, so
// every member stopped before its caches synced (deleted while its API
// server was slow, or a start that timed out) would leave two goroutines
// per watched kind behind, for good. The informers a member's cache makes
// close that channel also when the member's lifetime ends.

// newInformerFunc wraps next (client-go's constructor when nil) so that
// the informers it makes end their sync wait when lifetime does.
func newInformerFunc(next func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer, lifetime context.Context) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	if next == nil {
		next = toolscache.NewSharedIndexInformer
	}
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		inner := next(lw, obj, resync, idx)
		return &memberInformer{SharedIndexInformer: inner, lifetime: lifetime, synced: endedBy(inner.HasSyncedChecker(), lifetime)}
	}
}

// endedBy is a DoneChecker whose channel closes when d's does or when
// lifetime ends, whichever comes first.
func endedBy(d toolscache.DoneChecker, lifetime context.Context) toolscache.DoneChecker {
	e := &lifetimeDone{name: d.Name(), done: make(chan struct{})}
	select {
	case <-d.Done():
		close(e.done)
		return e
	default:
	}
	go func() {
		select {
		case <-d.Done():
		case <-lifetime.Done():
		}
		close(e.done)
	}()
	return e
}

type lifetimeDone struct {
	name string
	done chan struct{}
}

func (d *lifetimeDone) Name() string          { return d.name }
func (d *lifetimeDone) Done() <-chan struct{} { return d.done }

// memberInformer is a SharedIndexInformer whose sync checkers, its own and
// those of its handler registrations, also finish when the member stops.
// HasSynced still tells the truth.
type memberInformer struct {
	toolscache.SharedIndexInformer
	lifetime context.Context
	synced   toolscache.DoneChecker
}

func (i *memberInformer) HasSyncedChecker() toolscache.DoneChecker { return i.synced }

func (i *memberInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.registration(i.SharedIndexInformer.AddEventHandler(h))
}

func (i *memberInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.registration(i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, p))
}

func (i *memberInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.registration(i.SharedIndexInformer.AddEventHandlerWithOptions(h, o))
}

// RemoveEventHandler unwraps what AddEventHandler returned.
func (i *memberInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	if mr, ok := r.(*memberRegistration); ok {
		r = mr.ResourceEventHandlerRegistration
	}
	return i.SharedIndexInformer.RemoveEventHandler(r)
}

func (i *memberInformer) registration(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err != nil {
		return r, err
	}
	return &memberRegistration{ResourceEventHandlerRegistration: r, lifetime: i.lifetime}, nil
}

type memberRegistration struct {
	toolscache.ResourceEventHandlerRegistration
	lifetime context.Context

	once   sync.Once
	synced toolscache.DoneChecker
}

func (r *memberRegistration) HasSyncedChecker() toolscache.DoneChecker {
	r.once.Do(func() { r.synced = endedBy(r.ResourceEventHandlerRegistration.HasSyncedChecker(), r.lifetime) })
	return r.synced
}
