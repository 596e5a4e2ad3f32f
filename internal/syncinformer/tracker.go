package syncinformer

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Tracker remembers the sync checkers of the informers and handler
// registrations it sees, so Wait can wait for all of them by notification.
// The zero value is ready to use.
type Tracker struct {
	mu sync.Mutex
	// checkers are those not yet seen done, in the order added: a checker
	// once done stays done, and is dropped (a member keeps its tracker as
	// long as it runs, and adds to it per informer and per handler).
	checkers []tracked
	// moves counts the changes that move checkers (drops and Forget): a
	// wait drops the checkers it saw done only if none moved meanwhile.
	moves int
	// changed is closed, and replaced, when a checker is added.
	changed chan struct{}
}

// Track remembers inf's checker and returns inf wrapped so that the
// checker of every handler registered on it is remembered too.
func (t *Tracker) Track(inf cache.Informer) cache.Informer {
	t.Add(inf.HasSyncedChecker())
	return &trackedInformer{Informer: inf, t: t}
}

// Wait waits until every checker seen so far is done, those added while
// it waits included, and reports false if ctx ends first.
func (t *Tracker) Wait(ctx context.Context) bool {
	_, ok := t.Settle(ctx)
	return ok
}

// Settle is Wait, and returns as well a channel that closes when a
// checker is added after the ones it saw done: a caller that goes on to
// look at the informers (controller-runtime's WaitForCacheSync, which
// polls every 100ms for one that has not synced) knows that it may find
// one it has not waited for.
func (t *Tracker) Settle(ctx context.Context) (<-chan struct{}, bool) {
	for {
		t.mu.Lock()
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		changed, moves := t.changed, t.moves
		pending := make([]toolscache.DoneChecker, 0, len(t.checkers))
		for _, c := range t.checkers {
			pending = append(pending, c.checker)
		}
		t.mu.Unlock()
		if len(pending) == 0 {
			return changed, true
		}
		for _, d := range pending {
			select {
			case <-d.Done():
			case <-ctx.Done():
				return nil, false
			}
		}
		t.mu.Lock()
		if t.moves == moves {
			// Added since are after them: drop the first ones, all done.
			t.checkers = append([]tracked(nil), t.checkers[len(pending):]...)
			t.moves++
		}
		t.mu.Unlock()
	}
}

// tracked is a checker, and the example object of the informer it is
// of, if known (see Forget).
type tracked struct {
	checker toolscache.DoneChecker
	example runtime.Object
}

// Add remembers d.
func (t *Tracker) Add(d toolscache.DoneChecker) { t.AddOf(nil, d) }

// AddOf remembers d, the checker of an informer built with example, which
// Forget may match.
func (t *Tracker) AddOf(example runtime.Object, d toolscache.DoneChecker) {
	t.mu.Lock()
	t.checkers = append(t.checkers, tracked{checker: d, example: example})
	if t.changed != nil {
		close(t.changed)
	}
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// Forget drops the checkers added with an example that matches: those of
// informers that were removed, and will never sync.
func (t *Tracker) Forget(match func(example runtime.Object) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checkers = slices.DeleteFunc(t.checkers, func(c tracked) bool { return c.example != nil && match(c.example) })
	t.moves++
}

type trackedInformer struct {
	cache.Informer
	t *Tracker
}

func (i *trackedInformer) tracked(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		i.t.Add(r.HasSyncedChecker())
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
