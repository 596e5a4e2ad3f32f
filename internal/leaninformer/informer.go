package leaninformer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Backoff between attempts to list and watch after a failure: client-go's
// reflector's (800ms doubling to 30s, full jitter, reset after 2 minutes
// without a failure).
var backoff = wait.Backoff{
	Duration: 800 * time.Millisecond,
	Cap:      30 * time.Second,
	Steps:    int(math.Ceil(float64(30*time.Second) / float64(800*time.Millisecond))),
	Factor:   2.0,
	Jitter:   1.0,
}

const backoffReset = 2 * time.Minute

// minimumResyncPeriod is client-go's lower bound for a handler's resync.
const minimumResyncPeriod = time.Second

// ErrStopped is returned when a handler or an indexer is added to an
// informer that has stopped.
var ErrStopped = errors.New("informer has stopped")

// ErrStarted is returned when the transform or the watch-error handler is
// set on an informer that has started.
var ErrStarted = errors.New("informer has already started")

// New returns an informer of exampleObject's kind, with the
// signature of client-go's NewSharedIndexInformer (and of
// controller-runtime's cache.Options.NewInformer). resync is the default
// resync period of its handlers and how often it checks for resyncs; zero
// is none.
func New(lw toolscache.ListerWatcher, exampleObject runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	return newInformer(lw, exampleObject, resync, indexers, clock.RealClock{})
}

func newInformer(lw toolscache.ListerWatcher, example runtime.Object, resync time.Duration, indexers toolscache.Indexers, clk clock.Clock) *Informer {
	return &Informer{
		lw:            lw,
		example:       example,
		indexer:       toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, indexers),
		resyncCheck:   resync,
		defaultResync: resync,
		clock:         clk,
		synced:        make(chan struct{}),
		onWatchError:  toolscache.DefaultWatchErrorHandler,
	}
}

// Informer is a SharedIndexInformer that stores what it watches in the
// goroutine that watches and hands it to each handler from a queue of that
// handler's own. See the package documentation.
type Informer struct {
	lw            toolscache.ListerWatcher
	example       runtime.Object
	indexer       toolscache.Indexer
	defaultResync time.Duration
	clock         clock.Clock
	synced        chan struct{} // closed once the store holds the first list

	// mu guards the fields below and pairs each change of the indexer with
	// the handler list it is delivered to, so that a handler added meanwhile
	// sees every change either in its replay or as an event.
	mu           sync.Mutex
	started      bool
	stopped      bool
	hasSynced    bool
	resyncCheck  time.Duration
	transform    toolscache.TransformFunc
	onWatchError toolscache.WatchErrorHandlerWithContext
	reflector    *toolscache.Reflector
	handlers     []*registration // replaced, never changed in place

	// deliver serializes the queueing of events: the reflector's events
	// and its resyncs come from two goroutines.
	deliver sync.Mutex

	// deliveries are the handlers' delivery goroutines (see registration).
	deliveries deliveries
}

var _ toolscache.SharedIndexInformer = (*Informer)(nil)

// Run runs the informer until stopCh closes.
func (i *Informer) Run(stopCh <-chan struct{}) { i.RunWithContext(wait.ContextForChannel(stopCh)) }

// RunWithContext lists and watches until ctx ends, delivering to the
// handlers as it goes. An informer runs once.
func (i *Informer) RunWithContext(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	i.mu.Lock()
	if i.started {
		i.mu.Unlock()
		logger.Info("Warning: the informer has started, run more than once is not allowed")
		return
	}
	r := toolscache.NewReflectorWithOptions(i.lw, i.example, store{i}, toolscache.ReflectorOptions{
		Logger:       &logger,
		ResyncPeriod: i.resyncCheck,
		Clock:        i.clock,
	})
	r.ShouldResync = i.shouldResync
	i.reflector, i.started = r, true
	onWatchError := i.onWatchError
	i.mu.Unlock()
	defer func() {
		i.mu.Lock()
		i.stopped = true
		i.mu.Unlock()
		// Returns once the handlers' calls under way have returned (what
		// is still queued is dropped), as client-go's Run does.
		i.deliveries.stop()
	}()
	_ = backoff.DelayWithReset(i.clock, backoffReset).Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		if err := r.ListAndWatchWithContext(ctx); err != nil {
			onWatchError(ctx, r, err)
		}
		return false, nil
	})
}

// HasSynced reports whether the store holds the initial list (its
// handlers' registrations say whether they have been handed it).
func (i *Informer) HasSynced() bool { return isClosed(i.synced) }

// HasSyncedChecker is done once HasSynced is true.
func (i *Informer) HasSyncedChecker() toolscache.DoneChecker {
	return doneChecker{name: fmt.Sprintf("SharedIndexInformer %T", i.example), done: i.synced}
}

// LastSyncResourceVersion is the resource version the informer last saw.
func (i *Informer) LastSyncResourceVersion() string {
	i.mu.Lock()
	r := i.reflector
	i.mu.Unlock()
	if r == nil {
		return ""
	}
	return r.LastSyncResourceVersion()
}

// SetWatchErrorHandler sets what is called when a list or watch fails.
func (i *Informer) SetWatchErrorHandler(handler toolscache.WatchErrorHandler) error {
	return i.SetWatchErrorHandlerWithContext(func(_ context.Context, r *toolscache.Reflector, err error) { handler(r, err) })
}

// SetWatchErrorHandlerWithContext sets what is called when a list or
// watch fails, before the informer starts.
func (i *Informer) SetWatchErrorHandlerWithContext(handler toolscache.WatchErrorHandlerWithContext) error {
	return i.beforeStart(func() { i.onWatchError = handler })
}

// SetTransform sets a function applied to every object before it is
// stored, before the informer starts.
func (i *Informer) SetTransform(transform toolscache.TransformFunc) error {
	return i.beforeStart(func() { i.transform = transform })
}

// beforeStart runs set under the lock if the informer has not started.
func (i *Informer) beforeStart(set func()) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.started {
		return ErrStarted
	}
	set()
	return nil
}

// IsStopped reports whether the informer has stopped running.
func (i *Informer) IsStopped() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.stopped
}

// GetStore returns the informer's store, its indexer.
func (i *Informer) GetStore() toolscache.Store { return i.indexer }

// GetIndexer returns the informer's indexer.
func (i *Informer) GetIndexer() toolscache.Indexer { return i.indexer }

// AddIndexers adds indexers to the informer's indexer.
func (i *Informer) AddIndexers(indexers toolscache.Indexers) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped {
		return fmt.Errorf("adding indexers: %w", ErrStopped)
	}
	return i.indexer.AddIndexers(indexers)
}

// GetController returns a view of the informer as a client-go Controller.
// As with client-go's informer, running it does nothing: run the informer.
func (i *Informer) GetController() toolscache.Controller { return controller{i} }

type controller struct{ i *Informer }

var _ toolscache.Controller = controller{}

func (controller) Run(<-chan struct{})                        {}
func (controller) RunWithContext(context.Context)             {}
func (c controller) HasSynced() bool                          { return c.i.HasSynced() }
func (c controller) HasSyncedChecker() toolscache.DoneChecker { return c.i.HasSyncedChecker() }
func (c controller) LastSyncResourceVersion() string          { return c.i.LastSyncResourceVersion() }

type doneChecker struct {
	name string
	done chan struct{}
}

func (d doneChecker) Name() string          { return d.name }
func (d doneChecker) Done() <-chan struct{} { return d.done }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
