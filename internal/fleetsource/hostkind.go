package fleetsource

import (
	"context"
	"errors"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	membermgr "github.com/mccr-dev/mccr/internal/member"
)

// HostKind returns a source for a member controller that delivers the
// events of obj's kind in host (the host Manager's cache) to h, after the
// predicates (see server.HostKind). Its handler is removed from the host
// informer when the controller's ctx ends.
func HostKind(host cache.Cache, obj client.Object, h handler.EventHandler, preds ...predicate.Predicate) source.SyncingSource {
	return &hostKind{host: host, obj: obj, h: h, preds: preds, started: make(chan struct{})}
}

type hostKind struct {
	host  cache.Cache
	obj   client.Object
	h     handler.EventHandler
	preds []predicate.Predicate
	once  startOnce

	started chan struct{} // closed once Start has registered (or failed)
	reg     toolscache.ResourceEventHandlerRegistration
	err     error
}

func (k *hostKind) String() string { return fmt.Sprintf("host kind source: %T", k.obj) }

// Start adds the source's handler to the host informer of the kind; it is
// removed when ctx ends.
func (k *hostKind) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if k.host == nil || k.obj == nil || k.h == nil {
		return errors.New("server.HostKind: the Server, object and handler must not be nil")
	}
	if err := k.once.first(); err != nil {
		return err
	}
	defer close(k.started)
	inf, err := k.host.GetInformer(ctx, k.obj, cache.BlockUntilSynced(false))
	if err != nil {
		k.err = fmt.Errorf("host kind %T: %w", k.obj, err)
		return k.err
	}
	reg, err := inf.AddEventHandler(informerHandler(ctx, q, k.h, k.preds))
	if err != nil {
		k.err = fmt.Errorf("host kind %T: %w", k.obj, err)
		return k.err
	}
	context.AfterFunc(ctx, func() { _ = inf.RemoveEventHandler(reg) })
	k.reg = reg
	return nil
}

// WaitForSync returns once the host objects of the kind have been handed
// to the handler.
func (k *hostKind) WaitForSync(ctx context.Context) error {
	select {
	case <-k.started:
	case <-ctx.Done():
		return fmt.Errorf("%s: not started: %w", k, ctx.Err())
	}
	if k.err != nil {
		return k.err
	}
	select {
	case <-k.reg.HasSyncedChecker().Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for the host cache to sync: %w", k, ctx.Err())
	}
}

// HostObject returns an object standing for obj's kind in host, for the
// builder's Watches in a member controller (see server.HostObject): a
// member's cache hands out host's informer for it, so the builder's
// predicates reach host events. It is nil if host or obj is nil, which the
// controller refuses when it starts.
func HostObject(host cache.Cache, obj client.Object) client.Object {
	if host == nil || obj == nil {
		return nil
	}
	return &hostObject{Object: obj, host: host}
}

// hostObject is a host kind as a member's cache recognises it.
type hostObject struct {
	client.Object
	host cache.Cache
}

var _ membermgr.ServedElsewhere = &hostObject{}

// InformerElsewhere returns the host cache's informer of the kind.
func (o *hostObject) InformerElsewhere(ctx context.Context, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := o.host.GetInformer(ctx, o.Object, opts...)
	if err != nil {
		return nil, fmt.Errorf("host kind %T: %w", o.Object, err)
	}
	return inf, nil
}
