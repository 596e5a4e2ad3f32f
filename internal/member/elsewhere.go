package member

import (
	"context"
	"errors"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServedElsewhere is an object standing for a kind that another cache
// serves — the host's, for a member controller that watches a host kind.
// A member's cache hands out that cache's informer for it, so that
// controller-runtime's source.Kind, and with it the builder's Watches,
// WithEventFilter and WithPredicates, work for a kind of another cluster.
//
// The informer outlives the member: every handler added through the
// member's cache is removed when the member stops or restarts, which
// source.Kind itself never does (its informers die with its cache).
type ServedElsewhere interface {
	client.Object
	// InformerElsewhere returns the other cache's informer of the kind.
	InformerElsewhere(ctx context.Context, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// ErrIndexElsewhere refuses an index on a kind another cache serves: the
// indexes of that informer are its owner's, and every member adding its
// own would conflict with the next.
var ErrIndexElsewhere = errors.New("the kind is served by the host's cache: index it with the host Manager's IndexField")

// borrowedInformer is another cache's informer lent to a member until the
// member's lifetime ends.
type borrowedInformer struct {
	cache.Informer
	lifetime context.Context
}

func (i *borrowedInformer) returned(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		context.AfterFunc(i.lifetime, func() { _ = i.RemoveEventHandler(r) })
	}
	return r, err
}

func (i *borrowedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.returned(i.Informer.AddEventHandler(h))
}

func (i *borrowedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, p time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.returned(i.Informer.AddEventHandlerWithResyncPeriod(h, p))
}

func (i *borrowedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.returned(i.Informer.AddEventHandlerWithOptions(h, o))
}

// AddIndexers refuses: see ErrIndexElsewhere.
func (i *borrowedInformer) AddIndexers(toolscache.Indexers) error { return ErrIndexElsewhere }
