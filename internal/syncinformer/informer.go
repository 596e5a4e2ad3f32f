package syncinformer

import (
	"context"
	"reflect"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
)

// NewInformerFunc builds an informer; it is the type of
// cache.Options.NewInformer.
type NewInformerFunc = func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

// Wrap returns a NewInformerFunc around next (client-go's constructor when
// nil) whose informers report, through HasSyncedChecker (theirs and their
// handler registrations'), done once they have synced, once ends is
// closed, or while their kind is in forbidden (nil: none). HasSynced stays
// true to the informer except for forbidden kinds, which count as synced.
//
// client-go closes an informer's HasSyncedChecker channel when it has
// synced, and never when it stops first; controller-runtime's
// namespace-restricted cache starts a goroutine per informer and per
// registration that waits on that channel. Closing ends when the cache
// stops lets those goroutines go. See Kinds for forbidden kinds.
func Wrap(ends <-chan struct{}, next NewInformerFunc, forbidden *Kinds) NewInformerFunc {
	if next == nil {
		next = toolscache.NewSharedIndexInformer
	}
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		inner := next(lw, obj, resync, idx)
		i := &informer{SharedIndexInformer: inner, ends: ends, forbidden: forbidden, kind: KindOf(obj)}
		i.synced = i.follow(inner.HasSyncedChecker(), true)
		return i
	}
}

// KindOf describes obj's type as client-go's reflectors do
// (Reflector.TypeDescription), the key of Kinds: an unstructured object
// with its group, version and kind set by those, anything else by its Go
// type. (Metadata-only informers are all "*v1.PartialObjectMetadata".)
func KindOf(obj runtime.Object) string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if gvk := u.GroupVersionKind(); !gvk.Empty() {
			return gvk.String()
		}
	}
	return reflect.TypeOf(obj).String()
}

// informer is a SharedIndexInformer whose sync checkers, its own and those
// of its handler registrations, also finish when ends closes or the kind is
// forbidden.
type informer struct {
	toolscache.SharedIndexInformer
	ends      <-chan struct{}
	forbidden *Kinds
	kind      string
	synced    toolscache.DoneChecker
}

// follow returns a DoneChecker that is done when d is, when ends closes,
// or while the kind is forbidden. With owner set, a real
// sync of d also takes the kind out of the forbidden set (its rule was
// granted). The goroutine ends with the first two.
func (i *informer) follow(d toolscache.DoneChecker, owner bool) toolscache.DoneChecker {
	return Follow(d, i.forbidden, i.kind, i.ends, owner)
}

// Follow returns a DoneChecker that is done when d is, when ends closes,
// or while kind is in forbidden. With owner set, a real sync of d also
// takes kind out of forbidden (its rule was granted), at once if d has
// synced already. Its goroutine ends with d or ends.
func Follow(d toolscache.DoneChecker, forbidden *Kinds, kind string, ends <-chan struct{}, owner bool) toolscache.DoneChecker {
	select {
	case <-d.Done():
		if owner {
			forbidden.Allow(kind)
		}
		return d
	default:
	}
	e := &doneChecker{of: d, done: make(chan struct{})}
	go func() {
		var once sync.Once
		finish := func() { once.Do(func() { close(e.done) }) }
		defer finish()
		for {
			changed := forbidden.Changes()
			if forbidden.Has(kind) {
				finish()
			}
			select {
			case <-d.Done():
				if owner {
					forbidden.Allow(kind)
				}
				return
			case <-ends:
				return
			case <-changed:
			}
		}
	}()
	return e
}

// doneChecker is done when the checker it follows is, or sooner; named
// after it when asked (a member keeps a checker per informer and per
// handler for as long as it runs).
type doneChecker struct {
	of   toolscache.DoneChecker
	done chan struct{}
}

func (d *doneChecker) Name() string          { return d.of.Name() }
func (d *doneChecker) Done() <-chan struct{} { return d.done }

func (i *informer) HasSyncedChecker() toolscache.DoneChecker { return i.synced }

// HasSynced is true once the informer has synced, and while its kind is
// forbidden (controller-runtime's cache-wide waits use it).
func (i *informer) HasSynced() bool {
	return i.SharedIndexInformer.HasSynced() || i.forbidden.Has(i.kind)
}

func (i *informer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.registration(i.SharedIndexInformer.AddEventHandler(h))
}

func (i *informer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.registration(i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, p))
}

func (i *informer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.registration(i.SharedIndexInformer.AddEventHandlerWithOptions(h, o))
}

// RemoveEventHandler unwraps what AddEventHandler returned.
func (i *informer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	if mr, ok := r.(*registration); ok {
		r = mr.ResourceEventHandlerRegistration
	}
	return i.SharedIndexInformer.RemoveEventHandler(r)
}

func (i *informer) registration(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err != nil {
		return r, err
	}
	return &registration{ResourceEventHandlerRegistration: r, informer: i}, nil
}

type registration struct {
	toolscache.ResourceEventHandlerRegistration
	informer *informer

	once   sync.Once
	synced toolscache.DoneChecker
}

func (r *registration) HasSyncedChecker() toolscache.DoneChecker {
	r.once.Do(func() { r.synced = r.informer.follow(r.ResourceEventHandlerRegistration.HasSyncedChecker(), false) })
	return r.synced
}

// HasSynced is true once the handler has seen the initial list, and while
// the kind is forbidden (a controller's source waits on it).
func (r *registration) HasSynced() bool {
	return r.ResourceEventHandlerRegistration.HasSynced() || r.informer.forbidden.Has(r.informer.kind)
}

// RunWithContext runs the informer under a runContext: contexts derived
// from it end when the run returns, without a goroutine each. An informer
// that runs detached (leaninformer's, adopted by a Runner) returns at once
// and does not heed the context it is given: it is run as it is.
func (i *informer) RunWithContext(ctx context.Context) {
	if d, ok := i.SharedIndexInformer.(detached); ok && d.RunsDetached() {
		i.SharedIndexInformer.RunWithContext(ctx)
		return
	}
	rc := newRunContext(ctx)
	defer rc.stop()
	i.SharedIndexInformer.RunWithContext(rc)
}

// detached is an informer whose run returns at once, stopped by other
// means than its run's context.
type detached interface{ RunsDetached() bool }

// Unwrap returns the informer Wrap's constructor built.
func (i *informer) Unwrap() toolscache.SharedIndexInformer { return i.SharedIndexInformer }

// Run runs the informer until stop closes, as RunWithContext.
func (i *informer) Run(stop <-chan struct{}) { i.RunWithContext(wait.ContextForChannel(stop)) }
