package member

import (
	"context"
	"reflect"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
)

// clientOptions makes the member's client read its own cache, and, with
// controller-runtime's read-your-writes consistency on
// (client.CacheOptions.EnableReadYourWritesConsistency), makes its reads'
// waits end with the member.
//
// cluster.New sets the Reader of the CacheOptions it is given in place,
// and a Server's host and members all start from the one ctrl.Options the
// user passed: sharing that pointer, every member's cached reads, and the
// read-your-writes waits for a member's writes, would go to the cache of
// whichever cluster was built first, the host's. So the member gets a
// copy without a Reader, which cluster.New fills with the member's cache.
//
// With read-your-writes on, a Get or List first waits until the cache has
// seen the resource version of this client's last write of that kind (and
// any write in flight on the same object). It waits on the caller's ctx
// alone; that resource version may never come: the member stopped, or
// the object is outside what the cache holds (another namespace, a label
// the cache's selector leaves out), and a Reconcile's ctx has no deadline.
// consistentReads ends the wait when the member stops too.
func clientOptions(lifetime context.Context, co *cluster.Options) {
	c := co.Client.Cache
	if c == nil {
		return
	}
	own := *c
	own.Reader = nil
	co.Client.Cache = &own
	if !ptr.Deref(own.EnableReadYourWritesConsistency, false) {
		return
	}
	next := co.NewClient
	if next == nil {
		next = client.New
	}
	co.NewClient = func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		cl, err := next(cfg, opts)
		if err != nil {
			return nil, err
		}
		cr := &consistentReads{Client: cl, lifetime: lifetime}
		if opts.Cache != nil {
			cr.cache, _ = opts.Cache.Reader.(*syncNotifyingCache)
		}
		return cr, nil
	}
}

// consistentReads runs a read-your-writes client's reads under a context
// that also ends when the member stops.
type consistentReads struct {
	client.Client
	lifetime context.Context
	// cache, when it is the member's own, refuses reads of a kind the
	// member may not list, and reads outside its scope, before they wait
	// for a resource version that kind's informer will never see.
	cache *syncNotifyingCache
}

// Get waits for the cache to have seen this client's writes of key, then
// reads it from the cache.
func (c *consistentReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.readable(obj); err != nil {
		return err
	}
	if s := c.scoped(); s != nil {
		if err := s.outside(obj, key.Namespace); err != nil {
			return err
		}
	}
	return c.bounded(ctx, func(ctx context.Context) error { return c.Client.Get(ctx, key, obj, opts...) })
}

// List waits for the cache to have seen this client's writes of the kind,
// then lists from the cache.
func (c *consistentReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.readable(list); err != nil {
		return err
	}
	if s := c.scoped(); s != nil {
		if err := s.outsideList(list, opts); err != nil {
			return err
		}
	}
	return c.bounded(ctx, func(ctx context.Context) error { return c.Client.List(ctx, list, opts...) })
}

// scoped returns the member's cache when a scope (config.Scope) keeps it
// to some namespaces, nil otherwise. A read outside the scope fails there
// with ErrOutOfScope, and must do so before it waits for this client's
// writes: one made outside the scope (the member's identity may write
// there) has a resource version that the cache's informers, which leave
// that namespace out, never see.
func (c *consistentReads) scoped() *scopedReads {
	if c.cache == nil {
		return nil
	}
	s, _ := c.cache.Cache.(*scopedReads)
	return s
}

func (c *consistentReads) readable(obj any) error {
	if c.cache == nil {
		return nil
	}
	return c.cache.readable(readType(reflect.TypeOf(obj)))
}

// bounded runs read under ctx, cut short when the member stops; a read cut
// so, while ctx still runs, returns errMemberStopped.
func (c *consistentReads) bounded(ctx context.Context, read func(context.Context) error) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.lifetime, func() { cancel(errMemberStopped) })
	defer stop()
	err := read(rctx)
	if err != nil && ctx.Err() == nil && c.lifetime.Err() != nil {
		return errMemberStopped
	}
	return err
}
