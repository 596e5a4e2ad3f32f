package server

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// syncNotifyingCache makes a member's start wait for its caches by
// notification instead of by polling.
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

	mu       sync.Mutex
	checkers []toolscache.DoneChecker
}

func newSyncNotifyingCache(next cache.NewCacheFunc) cache.NewCacheFunc {
	if next == nil {
		next = cache.New
	}
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		c, err := next(cfg, opts)
		if err != nil {
			return nil, err
		}
		return &syncNotifyingCache{Cache: c}, nil
	}
}

func (c *syncNotifyingCache) track(d toolscache.DoneChecker) {
	c.mu.Lock()
	c.checkers = append(c.checkers, d)
	c.mu.Unlock()
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
	d := i.HasSyncedChecker()
	c.track(d)
	if block {
		select {
		case <-d.Done():
		case <-ctx.Done():
		}
	}
	return &notifyingInformer{Informer: i, c: c}, nil
}

func (c *syncNotifyingCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, append(opts, cache.BlockUntilSynced(false))...)
	return c.wrap(ctx, i, err, blocking(opts))
}

func (c *syncNotifyingCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformerForKind(ctx, gvk, append(opts, cache.BlockUntilSynced(false))...)
	return c.wrap(ctx, i, err, blocking(opts))
}

// WaitForCacheSync waits for every informer and handler handed out by this
// cache to report synced, then lets the underlying cache confirm.
func (c *syncNotifyingCache) WaitForCacheSync(ctx context.Context) bool {
	c.mu.Lock()
	checkers := append([]toolscache.DoneChecker(nil), c.checkers...)
	c.mu.Unlock()
	for _, d := range checkers {
		select {
		case <-d.Done():
		case <-ctx.Done():
			return false
		}
	}
	return c.Cache.WaitForCacheSync(ctx)
}

type notifyingInformer struct {
	cache.Informer
	c *syncNotifyingCache
}

func (i *notifyingInformer) tracked(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		i.c.track(r.HasSyncedChecker())
	}
	return r, err
}

func (i *notifyingInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandler(h))
}

func (i *notifyingInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandlerWithResyncPeriod(h, p))
}

func (i *notifyingInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.tracked(i.Informer.AddEventHandlerWithOptions(h, o))
}
