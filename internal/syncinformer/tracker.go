package syncinformer

import (
	"context"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Tracker remembers the sync checkers of the informers and handler
// registrations it sees, so Wait can wait for all of them by notification.
// The zero value is ready to use.
type Tracker struct {
	mu       sync.Mutex
	checkers []toolscache.DoneChecker
}

// Track remembers inf's checker and returns inf wrapped so that the
// checker of every handler registered on it is remembered too.
func (t *Tracker) Track(inf cache.Informer) cache.Informer {
	t.add(inf.HasSyncedChecker())
	return &trackedInformer{Informer: inf, t: t}
}

// Wait waits until every checker seen so far is done, and reports false
// if ctx ends first.
func (t *Tracker) Wait(ctx context.Context) bool {
	t.mu.Lock()
	checkers := append([]toolscache.DoneChecker(nil), t.checkers...)
	t.mu.Unlock()
	for _, d := range checkers {
		select {
		case <-d.Done():
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (t *Tracker) add(d toolscache.DoneChecker) {
	t.mu.Lock()
	t.checkers = append(t.checkers, d)
	t.mu.Unlock()
}

type trackedInformer struct {
	cache.Informer
	t *Tracker
}

func (i *trackedInformer) tracked(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		i.t.add(r.HasSyncedChecker())
	}
	return r, err
}

func (i *trackedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandler(h))
}

func (i *trackedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandlerWithResyncPeriod(h, p))
}

func (i *trackedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandlerWithOptions(h, o))
}
