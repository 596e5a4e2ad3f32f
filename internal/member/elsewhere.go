package member

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/syncinformer"
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
	// KindElsewhere names the kind as WaitingKinds lists it while the
	// other cache does not serve it ("example.com/v1, Kind=Policy (host)").
	KindElsewhere() string
	// MappedElsewhere tells whether the other cluster's REST mapper knows
	// the kind now: asked before each InformerElsewhere of a wait, since a
	// GetInformer that misses holds the other cache's informer map (which
	// its every read takes) through a discovery request.
	MappedElsewhere() bool
	// ForbiddenElsewhere returns the other cache's set of kinds its
	// identity may not list or watch, and the kind's key in it (nil: none
	// known). While the set has the kind, its informer counts as synced
	// for the member's waits, and UnservedKinds lists it.
	ForbiddenElsewhere() (forbidden *syncinformer.Kinds, desc string)
}

// ForbiddenElsewhereReason is the reason UnservedKinds gives for a kind
// the host serves and the host's identity may not list or watch.
const ForbiddenElsewhereReason = "the host cluster's identity may not list or watch it (a missing RBAC rule of the host Manager's); its controller runs without the host's objects, and receives them once the rule is granted"

// AwaitServedElsewhere returns what get returns: an informer of kind,
// which another cache serves. Called by a source's Start during its
// controller's warm-up (a waiter in ctx), when get fails because that
// cache's cluster does not serve the kind yet (a no-match error), it waits
// for it as a member's cache waits for a kind of its own (latekind.go):
// kind is listed in the Manager's WaitingKinds, the controller does not
// hold up the member's sync, and get is retried until it succeeds or
// fails otherwise, or ctx ends (then the no-match error is returned).
// Without a waiter in ctx it returns at once.
//
// Each retry of get waits until mapped (nil: always) says the other
// cluster's REST mapper knows the kind (see ServedElsewhere).
func AwaitServedElsewhere(ctx context.Context, log logr.Logger, kind string, mapped func() bool, get func() (cache.Informer, error)) (cache.Informer, error) {
	i, err := get()
	w := waiterFrom(ctx)
	if w == nil || !meta.IsNoMatchError(err) {
		return i, err
	}
	return awaitElsewhere(ctx, ctx, w, w.waiting, log, kind, mapped, get, err)
}

func awaitElsewhere(ctx, lifetime context.Context, w *waiter, waiting *kindSet, log logr.Logger, kind string, mapped func() bool, get func() (cache.Informer, error), err error) (cache.Informer, error) {
	log = log.WithValues("kind", kind)
	log.Info("kind not served by the host cluster (is its CRD installed there?); its controller waits for it while the others run")
	return awaitServed(ctx, lifetime, w, waiting, log, kind, mapped, get, err)
}

// ReportForbiddenElsewhere makes the Manager whose runnable warms up with
// ctx (a waiter in it; otherwise it does nothing) list kind in
// UnservedKinds, with reason, while forbidden (another cache's kinds its
// identity may not list or watch) has desc, until ctx ends.
func ReportForbiddenElsewhere(ctx context.Context, forbidden *syncinformer.Kinds, desc, kind, reason string) {
	if w := waiterFrom(ctx); w != nil {
		w.unserved.watchElsewhere(ctx, forbidden, desc, kind, reason)
	}
}

// ErrIndexElsewhere refuses an index on a kind another cache serves: the
// indexes of that informer are its owner's, and every member adding its
// own would conflict with the next.
var ErrIndexElsewhere = errors.New("the kind is served by the host's cache: index it with the host Manager's IndexField")

// borrowedInformer is another cache's informer lent to a member until the
// member's lifetime ends.
// While forbidden has desc (the lender's identity may not list the
// kind), the informer and its handler registrations count as synced, as
// a member's own forbidden kinds do (syncinformer.Kinds).
type borrowedInformer struct {
	cache.Informer
	lifetime  context.Context
	forbidden *syncinformer.Kinds
	desc      string

	syncedOnce sync.Once
	synced     toolscache.DoneChecker
}

// HasSyncedChecker is done once the informer has synced, or while the
// kind is forbidden (its lender takes it out of forbidden when its
// reflector lists again; an informer that synced before says nothing of
// now). One checker (and at most one goroutine following it) per informer
// lent, however often it is asked.
func (i *borrowedInformer) HasSyncedChecker() toolscache.DoneChecker {
	i.syncedOnce.Do(func() {
		i.synced = syncinformer.Follow(i.Informer.HasSyncedChecker(), i.forbidden, i.desc, i.lifetime.Done(), false)
	})
	return i.synced
}

func (i *borrowedInformer) HasSynced() bool {
	return i.Informer.HasSynced() || i.forbidden.Has(i.desc)
}

// borrowedRegistration is a handler registration on a borrowed informer.
type borrowedRegistration struct {
	toolscache.ResourceEventHandlerRegistration
	informer *borrowedInformer

	syncedOnce sync.Once
	synced     toolscache.DoneChecker
}

// HasSyncedChecker is done once the handler has been fed the informer's
// objects, or while the kind is forbidden; one per registration.
func (r *borrowedRegistration) HasSyncedChecker() toolscache.DoneChecker {
	r.syncedOnce.Do(func() {
		i := r.informer
		r.synced = syncinformer.Follow(r.ResourceEventHandlerRegistration.HasSyncedChecker(), i.forbidden, i.desc, i.lifetime.Done(), false)
	})
	return r.synced
}

func (r *borrowedRegistration) HasSynced() bool {
	return r.ResourceEventHandlerRegistration.HasSynced() || r.informer.forbidden.Has(r.informer.desc)
}

// RemoveEventHandler unwraps what AddEventHandler returned.
func (i *borrowedInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	if br, ok := r.(*borrowedRegistration); ok {
		r = br.ResourceEventHandlerRegistration
	}
	return i.Informer.RemoveEventHandler(r)
}

func (i *borrowedInformer) returned(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err != nil {
		return r, err
	}
	context.AfterFunc(i.lifetime, func() { _ = i.Informer.RemoveEventHandler(r) })
	return &borrowedRegistration{ResourceEventHandlerRegistration: r, informer: i}, nil
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
