package leaninformer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
// is none. Its Run blocks until its context ends, as client-go's does;
// a Runner's informers run detached instead.
func New(lw toolscache.ListerWatcher, exampleObject runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	return newInformer(lw, exampleObject, resync, indexers, clock.RealClock{})
}

func newInformer(lw toolscache.ListerWatcher, example runtime.Object, resync time.Duration, indexers toolscache.Indexers, clk clock.WithDelayedExecution) *Informer {
	i := &Informer{
		givenLW:       lw,
		lw:            toolscache.ToListerWatcherWithContext(lw),
		example:       example,
		expectedType:  reflect.TypeOf(example),
		indexer:       toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, indexers),
		resyncCheck:   resync,
		defaultResync: resync,
		clock:         clk,
		pool:          pumps,
		synced:        make(chan struct{}),
		released:      make(chan struct{}),
		onWatchError:  toolscache.DefaultWatchErrorHandler,
		streams:       streamsLists(lw),
	}
	if u, ok := example.(*unstructured.Unstructured); ok {
		if gvk := u.GroupVersionKind(); !gvk.Empty() {
			i.expectedGVK = &gvk
		}
	}
	return i
}

// Informer is a SharedIndexInformer whose list and watch run in a pump
// shared with other informers, which stores what the watch reports and
// hands it to each handler through a queue of that handler's own. See the
// package documentation.
type Informer struct {
	givenLW       toolscache.ListerWatcher
	lw            toolscache.ListerWatcherWithContext
	example       runtime.Object
	expectedType  reflect.Type
	expectedGVK   *schema.GroupVersionKind
	streams       bool // lists are streamed through the watch (watchlist.go)
	indexer       toolscache.Indexer
	defaultResync time.Duration
	clock         clock.WithDelayedExecution
	pool          *pool         // where its pump comes from
	runner        *Runner       // set for an informer that runs detached
	family        *family       // how its watch streams are read here; nil: by client-go (take.go)
	synced        chan struct{} // closed once the store holds the first list
	released      chan struct{} // closed once its pump has let it go, after it stopped

	// lastRV is the resource version the informer last saw (a *string).
	lastRV atomic.Pointer[string]

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
	handlers     []*registration // replaced, never changed in place
	stop         context.CancelFunc

	// deliver serializes the queueing of events: the pump's and those of
	// a list, which runs outside the pump.
	deliver sync.Mutex

	// deliveries are the handlers' delivery goroutines (see registration).
	deliveries deliveries

	// run is what the pump knows of the informer: set before it is handed
	// to the pump, then the pump's alone.
	run *runState
}

var _ toolscache.SharedIndexInformer = (*Informer)(nil)

// Run runs the informer until stopCh closes (see RunWithContext).
func (i *Informer) Run(stopCh <-chan struct{}) { i.RunWithContext(wait.ContextForChannel(stopCh)) }

// RunWithContext starts listing and watching, delivering to the handlers
// as it goes. An informer runs once.
//
// An informer of New runs until ctx ends, and returns once the handler
// calls under way have returned, as client-go's does. An informer of a
// Runner runs detached: RunWithContext returns at once, and the informer
// runs until it is stopped (Stop) or its Runner's context ends; ctx only
// lends it its logger. controller-runtime ends the context it hands an
// informer as soon as Run returns, so a detached informer must not heed it.
func (i *Informer) RunWithContext(ctx context.Context) {
	logger := klog.FromContext(ctx)
	i.mu.Lock()
	if i.started {
		i.mu.Unlock()
		logger.Info("Warning: the informer has started, run more than once is not allowed")
		return
	}
	i.started = true
	runner := i.runner
	base := ctx
	if runner != nil {
		base = klog.NewContext(runner.ctx, logger)
	}
	runCtx, stop := context.WithCancel(base)
	i.stop = stop
	i.run = newRunState(runCtx, i, logger)
	i.mu.Unlock()
	if runner != nil && !runner.add(i) {
		stop() // the Runner has stopped: so has the informer
	}
	assign(i)
	if runner != nil {
		return
	}
	<-runCtx.Done()
	i.Stop()
	i.wait()
}

// Stop stops the informer: its watch ends, its handlers get nothing more
// once their calls under way have returned, and what was queued for them
// is dropped. It does not wait for those calls (a handler may call Stop);
// a Runner's Stop does. Stopping an informer that has not started makes
// its Run return at once.
//
// Its pump learns of the stop from it, not from the context: an informer
// of New stops when its context ends through its Run, which waits for
// that, and a Runner's informers through the Runner, which watches its own
// context once for all of them. A watch of the context per informer
// (context.AfterFunc) would cost each informer of every cluster a few
// hundred bytes for as long as it runs.
func (i *Informer) Stop() {
	i.mu.Lock()
	stop, st := i.stop, i.run
	if !i.started {
		i.started, i.stopped = true, true
		close(i.released)
	}
	i.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	// The pump is set, under the pool's lock, before the start is posted
	// to it: a stop that finds none is seen by the start (runState.start),
	// one that finds it is posted after the context ended, and one posted
	// before the start is dropped by the pump, whose start then sees it.
	i.pool.mu.Lock()
	p := st.pump
	i.pool.mu.Unlock()
	if p != nil {
		p.stop(i)
	}
}

// halt marks the informer stopped: its deliveries drop what they hold once
// their handler call under way returns. Called by its pump.
func (i *Informer) halt() {
	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
	i.deliveries.halt()
}

// wait returns once the pump has let the informer go and no handler call
// of it is under way.
func (i *Informer) wait() {
	<-i.released
	i.deliveries.wait()
}

// HasSynced reports whether the store holds the initial list (its
// handlers' registrations say whether they have been handed it).
func (i *Informer) HasSynced() bool { return isClosed(i.synced) }

// HasSyncedChecker is done once HasSynced is true. It allocates nothing:
// caches keep the checkers of every informer they wait for.
func (i *Informer) HasSyncedChecker() toolscache.DoneChecker { return (*syncChecker)(i) }

// syncChecker is an informer's sync checker, named only when asked.
type syncChecker Informer

func (c *syncChecker) Name() string {
	return fmt.Sprintf("SharedIndexInformer %T", (*Informer)(c).example)
}
func (c *syncChecker) Done() <-chan struct{} { return c.synced }

// LastSyncResourceVersion is the resource version the informer last saw.
func (i *Informer) LastSyncResourceVersion() string {
	if rv := i.lastRV.Load(); rv != nil {
		return *rv
	}
	return ""
}

func (i *Informer) setLastSyncResourceVersion(rv string) { i.lastRV.Store(&rv) }

// SetWatchErrorHandler sets what is called when a list or watch fails.
func (i *Informer) SetWatchErrorHandler(handler toolscache.WatchErrorHandler) error {
	return i.SetWatchErrorHandlerWithContext(func(_ context.Context, r *toolscache.Reflector, err error) { handler(r, err) })
}

// SetWatchErrorHandlerWithContext sets what is called when a list or
// watch fails, before the informer starts. It is called with a
// Reflector that names the informer's kind (TypeDescription) and is never
// run: the informer lists and watches without one.
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

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// nameCarrier is the Reflector handed to the watch-error handler: it
// carries the informer's name and kind, as client-go's informer's does,
// and is never run.
func nameCarrier(i *Informer, logger logr.Logger) *toolscache.Reflector {
	return toolscache.NewReflectorWithOptions(i.givenLW, i.example, nil, toolscache.ReflectorOptions{
		Name:   "leaninformer",
		Logger: &logger,
		Clock:  i.clock,
	})
}

// RunsDetached reports whether the informer's Run returns at once (a
// Runner's informer) rather than when its context ends.
func (i *Informer) RunsDetached() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.runner != nil
}
