package member

import (
	"context"
	"reflect"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// Informers of a member end their sync wait with the member, and count a
// kind the member may not read as synced for those waits.
//
// client-go closes an informer's HasSyncedChecker channel when it has
// synced, and never when it stops first. controller-runtime's
// namespace-restricted cache (DefaultNamespaces) starts a goroutine per
// informer and per event handler that waits on exactly that channel, so
// every member stopped before its caches synced (deleted while its API
// server was slow, or a start that timed out) would leave two goroutines
// per watched kind behind, for good. The informers a member's cache makes
// close that channel also when the member's lifetime ends. See
// forbiddenKinds for the other reason to end a wait.

// informerFunc is controller-runtime's cache.Options.NewInformer.
type informerFunc = func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

// newInformerFunc wraps next (client-go's constructor when nil) so that
// the informers it makes end their sync wait when lifetime does, or when
// their kind is forbidden.
func newInformerFunc(lifetime context.Context, next informerFunc, forbidden *forbiddenKinds) informerFunc {
	if next == nil {
		next = toolscache.NewSharedIndexInformer
	}
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		inner := next(lw, obj, resync, idx)
		i := &memberInformer{SharedIndexInformer: inner, lifetime: lifetime, forbidden: forbidden, kind: kindOf(obj)}
		i.synced = i.follow(inner.HasSyncedChecker(), true)
		return i
	}
}

// kindOf describes obj's type as client-go's reflectors do in errors.
func kindOf(obj runtime.Object) string { return reflect.TypeOf(obj).String() }

// memberInformer is a SharedIndexInformer whose sync checkers, its own and
// those of its handler registrations, also finish when the member stops or
// the kind is forbidden.
type memberInformer struct {
	toolscache.SharedIndexInformer
	lifetime  context.Context
	forbidden *forbiddenKinds
	kind      string
	synced    toolscache.DoneChecker
}

// follow returns a DoneChecker that is done when d is, when the member's
// lifetime ends, or while the kind is forbidden. With owner set, a real
// sync of d also takes the kind out of the forbidden set (its rule was
// granted). The goroutine ends with the first two.
func (i *memberInformer) follow(d toolscache.DoneChecker, owner bool) toolscache.DoneChecker {
	e := &lifetimeDone{name: d.Name(), done: make(chan struct{})}
	select {
	case <-d.Done():
		close(e.done)
		return e
	default:
	}
	go func() {
		var once sync.Once
		finish := func() { once.Do(func() { close(e.done) }) }
		defer finish()
		for {
			changed := i.forbidden.changes()
			if i.forbidden.has(i.kind) {
				finish()
			}
			select {
			case <-d.Done():
				if owner {
					i.forbidden.allow(i.kind)
				}
				return
			case <-i.lifetime.Done():
				return
			case <-changed:
			}
		}
	}()
	return e
}

type lifetimeDone struct {
	name string
	done chan struct{}
}

func (d *lifetimeDone) Name() string          { return d.name }
func (d *lifetimeDone) Done() <-chan struct{} { return d.done }

func (i *memberInformer) HasSyncedChecker() toolscache.DoneChecker { return i.synced }

// HasSynced is true once the informer has synced, and while its kind is
// forbidden (controller-runtime's cache-wide waits use it).
func (i *memberInformer) HasSynced() bool {
	return i.SharedIndexInformer.HasSynced() || i.forbidden.has(i.kind)
}

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
	return &memberRegistration{ResourceEventHandlerRegistration: r, informer: i}, nil
}

type memberRegistration struct {
	toolscache.ResourceEventHandlerRegistration
	informer *memberInformer

	once   sync.Once
	synced toolscache.DoneChecker
}

func (r *memberRegistration) HasSyncedChecker() toolscache.DoneChecker {
	r.once.Do(func() { r.synced = r.informer.follow(r.ResourceEventHandlerRegistration.HasSyncedChecker(), false) })
	return r.synced
}

// HasSynced is true once the handler has seen the initial list, and while
// the kind is forbidden (a controller's source waits on it).
func (r *memberRegistration) HasSynced() bool {
	return r.ResourceEventHandlerRegistration.HasSynced() || r.informer.forbidden.has(r.informer.kind)
}
