package member

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// countingInformer counts the handlers registered on it.
type countingInformer struct {
	cache.Informer
	mu       sync.Mutex
	handlers map[*registration]bool
}

type registration struct {
	toolscache.ResourceEventHandlerRegistration
}

func (i *countingInformer) add() (toolscache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	r := &registration{}
	i.handlers[r] = true
	return r, nil
}

func (i *countingInformer) AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add()
}

func (i *countingInformer) AddEventHandlerWithResyncPeriod(toolscache.ResourceEventHandler, time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add()
}

func (i *countingInformer) AddEventHandlerWithOptions(toolscache.ResourceEventHandler, toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add()
}

func (i *countingInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.handlers, r.(*registration))
	return nil
}

func (i *countingInformer) AddIndexers(toolscache.Indexers) error { return nil }

func (i *countingInformer) count() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.handlers)
}

// TestBorrowedInformerReturnsHandlers: every handler a member adds to
// another cache's informer, by any of the three calls, is removed when the
// member's lifetime ends; an index is refused.
func TestBorrowedInformerReturnsHandlers(t *testing.T) {
	lifetime, end := context.WithCancel(context.Background())
	inner := &countingInformer{handlers: map[*registration]bool{}}
	b := &borrowedInformer{Informer: inner, lifetime: lifetime}
	var h toolscache.ResourceEventHandlerFuncs
	if _, err := b.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddEventHandlerWithResyncPeriod(h, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := inner.count(); n != 3 {
		t.Fatalf("%d handlers on the informer, want 3", n)
	}
	if err := b.AddIndexers(toolscache.Indexers{"x": nil}); !errors.Is(err, ErrIndexElsewhere) {
		t.Errorf("AddIndexers = %v, want ErrIndexElsewhere", err)
	}
	end()
	deadline := time.Now().Add(5 * time.Second)
	for inner.count() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers left on the informer after the member's lifetime ended", inner.count())
		}
		time.Sleep(time.Millisecond)
	}
	// A member that has already stopped adds nothing that stays.
	if _, err := b.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for inner.count() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a handler added after the member's lifetime ended stayed")
		}
		time.Sleep(time.Millisecond)
	}
}
