package syncinformer

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// NewInformerFunc builds an informer; it is the type of
// cache.Options.NewInformer.
type NewInformerFunc = func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

// Settled returns a NewInformerFunc whose informers report, through
// HasSyncedChecker (theirs and their registrations'), done once settled is
// closed. Close settled when the cache has synced or is stopped.
func Settled(settled <-chan struct{}) NewInformerFunc {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		return &settledInformer{
			SharedIndexInformer: toolscache.NewSharedIndexInformer(lw, obj, resync, idx),
			settled:             settled,
		}
	}
}

type settledInformer struct {
	toolscache.SharedIndexInformer
	settled <-chan struct{}
}

func (i *settledInformer) HasSyncedChecker() toolscache.DoneChecker {
	return checker{name: i.SharedIndexInformer.HasSyncedChecker().Name(), done: i.settled}
}

func (i *settledInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.wrap(i.SharedIndexInformer.AddEventHandler(h))
}

func (i *settledInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.wrap(i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, resync))
}

func (i *settledInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.wrap(i.SharedIndexInformer.AddEventHandlerWithOptions(h, o))
}

func (i *settledInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	if sr, ok := r.(settledRegistration); ok {
		r = sr.ResourceEventHandlerRegistration
	}
	return i.SharedIndexInformer.RemoveEventHandler(r)
}

func (i *settledInformer) wrap(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err != nil {
		return r, err
	}
	return settledRegistration{ResourceEventHandlerRegistration: r, settled: i.settled}, nil
}

type settledRegistration struct {
	toolscache.ResourceEventHandlerRegistration
	settled <-chan struct{}
}

func (r settledRegistration) HasSyncedChecker() toolscache.DoneChecker {
	return checker{name: r.ResourceEventHandlerRegistration.HasSyncedChecker().Name(), done: r.settled}
}

type checker struct {
	name string
	done <-chan struct{}
}

func (c checker) Name() string          { return c.name }
func (c checker) Done() <-chan struct{} { return c.done }
