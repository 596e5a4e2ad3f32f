package member

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/mccr-dev/mccr/internal/syncinformer"
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

// neverSynced is an informer (and a registration) whose sync never comes,
// as a host informer whose kind the host may not list.
type neverSynced struct {
	cache.Informer
	toolscache.ResourceEventHandlerRegistration
	done chan struct{}
}

func (n *neverSynced) Name() string                             { return "never" }
func (n *neverSynced) Done() <-chan struct{}                    { return n.done }
func (n *neverSynced) HasSyncedChecker() toolscache.DoneChecker { return n }
func (n *neverSynced) HasSynced() bool                          { return false }
func (n *neverSynced) AddIndexers(toolscache.Indexers) error    { return nil }

// TestBorrowedInformerFollowsItsSyncOnce: however often a member's waits
// ask a lent informer or its handler registration for their sync checker
// (as controller-runtime's do, while a host kind stays unsynced), each has
// one, followed by at most one goroutine until the member's lifetime ends.
func TestBorrowedInformerFollowsItsSyncOnce(t *testing.T) {
	lifetime, end := context.WithCancel(t.Context())
	defer end()
	never := &neverSynced{done: make(chan struct{})}
	i := &borrowedInformer{Informer: never, lifetime: lifetime, forbidden: syncinformer.NewKinds(), desc: "/v1, Kind=Secret"}
	r := &borrowedRegistration{ResourceEventHandlerRegistration: never, informer: i}
	before := runtime.NumGoroutine()
	first, firstReg := i.HasSyncedChecker(), r.HasSyncedChecker()
	for range 100 {
		if i.HasSyncedChecker() != first || r.HasSyncedChecker() != firstReg {
			t.Fatal("a sync checker asked again is a new one")
		}
	}
	if grown := runtime.NumGoroutine() - before; grown > 2 {
		t.Errorf("asking 101 times for the sync checkers of one informer and one registration started %d goroutines; want at most 2", grown)
	}
}
