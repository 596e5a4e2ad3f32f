package member

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/mccr-dev/mccr/internal/leaninformer"
	"github.com/mccr-dev/mccr/internal/syncinformer"
)

// syncNotifyingCache makes a member's start wait for its caches by
// notification instead of by polling, and makes reads issued before the
// cache has started wait for it instead of failing.
//
// client-go's WaitForCacheSync looks at HasSynced every 100ms, and a
// controller's source waits twice in a row (informer synced, then its
// handler fed), so a Manager's first Reconcile comes ~200ms after start
// even when the initial list took 10ms. Informers and handler registrations
// also expose a channel that closes when they have synced; this cache
// waits on those channels first, so that by the time the polling checks run
// they pass on their first, immediate look.
type syncNotifyingCache struct {
	cache.Cache
	// lifetime ends when the member stops or restarts: reads waiting for
	// an informer to sync return then, whatever the caller's ctx.
	lifetime context.Context
	// synced holds the object and list types whose informer has synced:
	// reads of those cannot wait, and take the direct path.
	synced sync.Map
	// forbidden are the kinds the member may not read.
	forbidden *syncinformer.Kinds
	// waiting are the kinds that warm-ups wait for (see latekind.go).
	waiting *kindSet
	scheme  *runtime.Scheme
	mapper  meta.RESTMapper
	log     logr.Logger

	// tracker knows the sync checkers of every informer the cache builds
	// and of every informer and handler registration it hands out, for
	// WaitForCacheSync.
	tracker *syncinformer.Tracker

	// runner runs the cache's leaninformers detached (see
	// leaninformer.Runner): they stop when the member's lifetime ends or
	// the cache stops, and when RemoveInformer removes their kind.
	runner *leaninformer.Runner
}

func newSyncNotifyingCache(lifetime context.Context, next cache.NewCacheFunc, forbidden *syncinformer.Kinds, waiting *kindSet, log logr.Logger) cache.NewCacheFunc {
	if next == nil {
		next = cache.New
	}
	if lifetime == nil {
		lifetime = context.Background()
	}
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		scheme := opts.Scheme
		if scheme == nil {
			scheme = clientgoscheme.Scheme // cache.New's default too
		}
		// The informers read their watch streams themselves, decoding
		// typed objects with the cache's scheme (leaninformer.TakeWatch,
		// called by the member's transport).
		runner := leaninformer.NewRunnerWithOptions(lifetime, leaninformer.RunnerOptions{Scheme: scheme})
		tracker := &syncinformer.Tracker{}
		newInformer := opts.NewInformer
		if newInformer == nil {
			newInformer = toolscache.NewSharedIndexInformer // controller-runtime's default
		}
		opts.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
			i := newInformer(lw, obj, resync, idx)
			runner.Adopt(i) // a leaninformer; other informers run as controller-runtime runs them
			// Every informer controller-runtime's WaitForCacheSync looks
			// at, including those built by reads and by other sources
			// meanwhile.
			tracker.AddOf(obj, i.HasSyncedChecker())
			return i
		}
		c, err := next(cfg, opts)
		if err != nil {
			return nil, err
		}
		return &syncNotifyingCache{
			Cache: c, lifetime: lifetime, forbidden: forbidden,
			waiting: waiting, scheme: scheme, mapper: opts.Mapper, log: log,
			runner: runner, tracker: tracker,
		}, nil
	}
}

// Get reads from the cache. A read of a kind whose informer has synced
// cannot wait and goes straight through. Any other read may wait (for the
// cache to start, or for a new informer to sync): it waits at most as long
// as the member lives, and a Get that arrives in the short gap between a
// member becoming routable and its cache starting waits for the start
// instead of returning controller-runtime's ErrCacheNotStarted, which no
// caller of a fleet expects.
func (c *syncNotifyingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	t := reflect.TypeOf(obj)
	if _, ok := c.synced.Load(t); ok {
		return c.Cache.Get(ctx, key, obj, opts...)
	}
	if err := c.readable(readType(t)); err != nil {
		return err
	}
	return c.waitingRead(ctx, t, func(ctx context.Context) error { return c.Cache.Get(ctx, key, obj, opts...) })
}

// List is Get's counterpart for lists.
func (c *syncNotifyingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	t := reflect.TypeOf(list)
	if _, ok := c.synced.Load(t); ok {
		return c.Cache.List(ctx, list, opts...)
	}
	if err := c.readable(readType(t)); err != nil {
		return err
	}
	return c.waitingRead(ctx, t, func(ctx context.Context) error { return c.Cache.List(ctx, list, opts...) })
}

// readable refuses a read of a kind the member may not list: its informer
// cannot sync, and the read would wait for as long as the member lives.
func (c *syncNotifyingCache) readable(t reflect.Type) error {
	if t == nil || !c.forbidden.Has(t.String()) {
		return nil
	}
	return apierrors.NewForbidden(schema.GroupResource{Resource: t.String()}, "", errForbiddenKind)
}

var errForbiddenKind = errors.New("the member cluster's identity may not list or watch this kind, so it is not cached; grant the RBAC rule and it is read again")

// readType is the kind a read of type t (an object or a list) is about.
func readType(t reflect.Type) reflect.Type {
	if it := itemType(t); it != nil {
		return it
	}
	return t
}

// itemType is the type of the items of a typed list (*v1.Secret for
// *v1.SecretList), as reflectors describe their kind; nil when unknown.
func itemType(list reflect.Type) reflect.Type {
	if list.Kind() != reflect.Pointer || list.Elem().Kind() != reflect.Struct {
		return nil
	}
	f, ok := list.Elem().FieldByName("Items")
	if !ok || f.Type.Kind() != reflect.Slice {
		return nil
	}
	return reflect.PointerTo(f.Type.Elem())
}

func (c *syncNotifyingCache) waitingRead(ctx context.Context, t reflect.Type, read func(context.Context) error) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.lifetime, func() { cancel(errMemberStopped) })
	defer stop()
	err := untilStarted(rctx, func() error { return read(rctx) })
	// The kind may have turned out forbidden while the read waited: its
	// informer then counts as synced, and the read found an empty store.
	if ferr := c.readable(readType(t)); ferr != nil {
		return ferr
	}
	switch {
	case err == nil:
		// Typed objects only: one unstructured or metadata-only type
		// stands for every kind.
		if t != unstructuredType && t != unstructuredListType && t != metadataType && t != metadataListType {
			c.synced.Store(t, struct{}{})
		}
	case ctx.Err() == nil && c.lifetime.Err() != nil:
		return errMemberStopped
	}
	return err
}

var (
	unstructuredType     = reflect.TypeFor[*unstructured.Unstructured]()
	unstructuredListType = reflect.TypeFor[*unstructured.UnstructuredList]()
	metadataType         = reflect.TypeFor[*metav1.PartialObjectMetadata]()
	metadataListType     = reflect.TypeFor[*metav1.PartialObjectMetadataList]()
)

// Start runs the cache until ctx ends, then stops its detached informers
// and returns once their handler calls under way have returned, as
// controller-runtime's cache does for the informers it runs.
func (c *syncNotifyingCache) Start(ctx context.Context) error {
	defer c.runner.Stop()
	return c.Cache.Start(ctx)
}

// RemoveInformer forgets that obj's kind had synced: a later read makes a
// new informer and may wait for it. controller-runtime stops the informers
// it runs; the detached ones of obj's kind (in every namespace the cache
// watches, as controller-runtime removes them all) are stopped here.
func (c *syncNotifyingCache) RemoveInformer(ctx context.Context, obj client.Object) error {
	c.synced.Clear()
	if err := c.Cache.RemoveInformer(ctx, obj); err != nil {
		return err
	}
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return err // controller-runtime's RemoveInformer found it first
	}
	removed := func(example runtime.Object) bool {
		egvk, err := apiutil.GVKForObject(example, c.scheme)
		return err == nil && egvk == gvk && informerFamily(example) == informerFamily(obj)
	}
	c.runner.StopWhere(removed)
	c.tracker.Forget(removed) // they will not sync: WaitForCacheSync no longer waits for them
	return nil
}

// informerFamily is which of controller-runtime's informer maps an
// object's informer is in: one per GVK for typed objects, unstructured
// ones and metadata-only ones each.
func informerFamily(obj runtime.Object) int {
	switch obj.(type) {
	case runtime.Unstructured:
		return 1
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		return 2
	default:
		return 0
	}
}

// startGapPoll is how often a read that found the cache not started tries
// again. The gap lasts from a member becoming routable to its cache's
// Start, a few milliseconds; the cache offers no signal for its end alone
// (WaitForCacheSync also waits for every informer to sync).
const startGapPoll = 5 * time.Millisecond

func untilStarted(ctx context.Context, read func() error) error {
	err := read()
	if !notStarted(err) {
		return err
	}
	t := time.NewTicker(startGapPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
		if err = read(); !notStarted(err) {
			return err
		}
	}
}

func notStarted(err error) bool {
	if err == nil {
		return false
	}
	var ns *cache.ErrCacheNotStarted
	return errors.As(err, &ns)
}

// blocking reports whether opts ask GetInformer to wait for the sync (the
// default).
func blocking(opts []cache.InformerGetOption) bool {
	var o cache.InformerGetOptions
	for _, f := range opts {
		f(&o)
	}
	return o.BlockUntilSynced == nil || *o.BlockUntilSynced
}

func (c *syncNotifyingCache) wrap(ctx context.Context, i cache.Informer, err error, block bool) (cache.Informer, error) {
	if err != nil {
		return nil, err
	}
	tracked := c.tracker.Track(i)
	if block {
		select {
		case <-i.HasSyncedChecker().Done():
		case <-ctx.Done():
		}
	}
	return tracked, nil
}

// GetInformer returns obj's informer. Called by a runnable's warm-up
// (a waiter in ctx) for a kind the cluster does not serve, it waits for
// the kind (see latekind.go); so it does for a kind another cache serves
// (ServedElsewhere) that cache's cluster does not serve.
func (c *syncNotifyingCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	nb := append(slices.Clip(opts), cache.BlockUntilSynced(false))
	if e, ok := obj.(ServedElsewhere); ok {
		get := func() (cache.Informer, error) { return e.InformerElsewhere(ctx, nb...) }
		i, err := get()
		if w := waiterFrom(ctx); w != nil && meta.IsNoMatchError(err) {
			i, err = awaitElsewhere(ctx, c.lifetime, w, c.waiting, c.log, e.KindElsewhere(), e.MappedElsewhere, get, err)
		}
		if err == nil {
			forbidden, desc := e.ForbiddenElsewhere()
			ReportForbiddenElsewhere(ctx, forbidden, desc, e.KindElsewhere(), ForbiddenElsewhereReason)
			i = &borrowedInformer{Informer: i, lifetime: c.lifetime, forbidden: forbidden, desc: desc}
		}
		return c.wrap(ctx, i, err, blocking(opts))
	}
	get := func() (cache.Informer, error) { return c.Cache.GetInformer(ctx, obj, nb...) }
	i, err := get()
	if w := waiterFrom(ctx); w != nil && meta.IsNoMatchError(err) {
		if gvk, gerr := apiutil.GVKForObject(obj, c.scheme); gerr == nil {
			i, err = c.awaitKind(ctx, w, gvk, get, err)
		}
	}
	return c.wrap(ctx, i, err, blocking(opts))
}

// GetInformerForKind is GetInformer by kind.
func (c *syncNotifyingCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	nb := append(slices.Clip(opts), cache.BlockUntilSynced(false))
	get := func() (cache.Informer, error) { return c.Cache.GetInformerForKind(ctx, gvk, nb...) }
	i, err := get()
	if w := waiterFrom(ctx); w != nil && meta.IsNoMatchError(err) {
		i, err = c.awaitKind(ctx, w, gvk, get, err)
	}
	return c.wrap(ctx, i, err, blocking(opts))
}

// WaitForCacheSync waits for every informer and handler handed out by this
// cache, and every informer it built, to report synced, then lets the
// underlying cache confirm.
//
// The underlying check looks at every informer of the cache, once at
// once and then every 100ms (client-go's WaitForCacheSync): one added by
// another source of the same controller after the wait here returned
// would cost a poll. Such an informer is tracked as it is built; its
// arrival cancels the underlying check, and the wait starts again with
// it included.
func (c *syncNotifyingCache) WaitForCacheSync(ctx context.Context) bool {
	for {
		added, ok := c.tracker.Settle(ctx)
		if !ok {
			return false
		}
		// The underlying wait can block on the informer map's lock (held
		// across a discovery request) without looking at ctx.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan bool, 1)
		go func() { done <- c.Cache.WaitForCacheSync(cctx) }()
		select {
		case ok := <-done:
			cancel()
			return ok
		case <-ctx.Done():
			cancel()
			return false
		case <-added:
			cancel()
		}
	}
}
