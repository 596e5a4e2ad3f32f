package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	membermgr "github.com/mccr-dev/mccr/internal/member"
	"github.com/mccr-dev/mccr/known"
)

// errSourceStarted is returned by a second Start of one source: like
// controller-runtime's sources, each serves one controller.
var errSourceStarted = errors.New("source already started; make one per controller")

// FleetKind returns a source for a controller on the host Manager: it
// delivers the events of obj's kind from every member of srv's fleet — the
// members there when the controller starts, those added later, and each
// new Manager a member gets after an Update or a restart — to h, after the
// predicates. The ctx h gets names the member the event came from
// (known.ClusterFrom), so a map function knows where the object lives:
//
//	ctrl.NewControllerManagedBy(srv.GetHostManager()).
//		For(&v1.Placement{}).
//		WatchesRawSource(server.FleetKind(srv, &corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(mapFn))).
//		Complete(r)
//
// It uses each member's own informer for the kind (shared with the
// member's controllers, no second watch) from the moment the member is
// Ready: every object it holds then arrives as a create event, as with
// controller-runtime's Kind source. When the member leaves, fails or
// restarts, its handler is removed from that informer. A member that is
// Syncing, Unreachable or cannot serve the kind never holds the host
// controller up: the source does not wait for any member to sync.
//
// With sharding (WithSharding), a replica's sources see the members that
// replica runs: a host controller that aggregates over the whole fleet
// runs on every replica (no leader election) and each aggregates its share,
// or reads the other replicas' results.
func FleetKind(srv *Server, obj client.Object, h handler.EventHandler, preds ...predicate.Predicate) source.Source {
	return &fleetKind{srv: srv, obj: obj, h: h, preds: preds}
}

type fleetKind struct {
	srv   *Server
	obj   client.Object
	h     handler.EventHandler
	preds []predicate.Predicate
	once  sync.Once
}

func (k *fleetKind) String() string { return fmt.Sprintf("fleet kind source: %T", k.obj) }

// Start follows the fleet until ctx ends.
func (k *fleetKind) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if k.srv == nil || k.obj == nil || k.h == nil {
		return errors.New("server.FleetKind: the Server, object and handler must not be nil")
	}
	started := true
	k.once.Do(func() { started = false })
	if started {
		return errSourceStarted
	}
	// attached is only touched by the subscription's goroutine.
	attached := map[string]*fleetAttachment{}
	k.srv.feed.subscribe(ctx, func(st memberState) {
		a := attached[st.name]
		if a != nil && a.mgr == st.mgr {
			return // the same Manager, Ready again or Unreachable
		}
		if a != nil {
			a.cancel()
			delete(attached, st.name)
		}
		if st.mgr != nil {
			attached[st.name] = k.attach(ctx, q, st.name, st.mgr)
		}
	}, func() {
		for _, a := range attached {
			a.cancel()
		}
	})
	return nil
}

// fleetAttachment is the source's handler on one member's informer.
type fleetAttachment struct {
	mgr    manager.Manager
	cancel context.CancelFunc
}

// attach adds the source's handler to the informer of the member's
// Manager, in a goroutine of its own (so a member slow to answer discovery
// delays no other). A kind the member does not serve yet is waited for;
// other failures are retried with a backoff. The handler is removed when
// the attachment is cancelled.
func (k *fleetKind) attach(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], name string, mgr manager.Manager) *fleetAttachment {
	actx, cancel := context.WithCancel(ctx)
	hctx := known.WithCluster(ctx, name)
	log := k.srv.log.WithValues("cluster", name, "source", k.String())
	// A kind the member does not serve yet (its CRD not installed there) is
	// waited for as the member's own controllers wait for theirs.
	wctx := membermgr.WaitForKind(actx)
	go func() {
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: 30 * time.Second}
		for {
			inf, err := mgr.GetCache().GetInformer(wctx, k.obj, cache.BlockUntilSynced(false))
			var reg toolscache.ResourceEventHandlerRegistration
			if err == nil {
				reg, err = inf.AddEventHandler(informerHandler(hctx, q, k.h, k.preds))
			}
			if err == nil {
				context.AfterFunc(actx, func() { _ = inf.RemoveEventHandler(reg) })
				return
			}
			if actx.Err() != nil {
				return
			}
			d := backoff.Step()
			log.Error(err, "cannot watch the kind in this member; trying again", "retryIn", d)
			t := time.NewTimer(d)
			select {
			case <-actx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return &fleetAttachment{mgr: mgr, cancel: cancel}
}

// HostObject stands for obj's kind in the host cluster, for the builder's
// Watches in a member controller: the events of host objects of that kind
// (through the host Manager's cache, shared with the host's controllers)
// reach the handler after the builder's WithEventFilter predicates and the
// watch's own WithPredicates, as every other watch of the controller:
//
//	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
//		return ctrl.NewControllerManagedBy(mgr).
//			For(&corev1.ConfigMap{}).
//			WithEventFilter(predicate.GenerationChangedPredicate{}).
//			Watches(server.HostObject(srv, &v1.Policy{}), handler.EnqueueRequestsFromMapFunc(mapFn)).
//			Complete(r)
//	})
//
// The member's cache hands out the host's informer for it, so this works
// with any source.Kind made from the member Manager's cache. The ctx the
// handler gets names the member whose controller the event is for. The
// handler is removed from the host informer when the member stops or
// restarts, so nothing of a departed member is left on the host.
//
// It is meant for Watches only: For, Owns and WatchesMetadata need the
// object's own kind, and the member's cache refuses an index on it (index
// host kinds with the host Manager's IndexField). A nil srv or obj gives a
// nil object, which the controller refuses when it starts.
func HostObject(srv *Server, obj client.Object) client.Object {
	if srv == nil || obj == nil {
		return nil
	}
	return &hostObject{Object: obj, srv: srv}
}

// hostObject is a host kind as a member's cache recognises it.
type hostObject struct {
	client.Object
	srv *Server
}

var _ membermgr.ServedElsewhere = &hostObject{}

// InformerElsewhere returns the host cache's informer of the kind.
func (o *hostObject) InformerElsewhere(ctx context.Context, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := o.srv.host.GetCache().GetInformer(ctx, o.Object, opts...)
	if err != nil {
		return nil, fmt.Errorf("host kind %T: %w", o.Object, err)
	}
	return inf, nil
}

// HostKind returns a source for a controller of a member: it delivers the
// events of obj's kind in the host cluster (through the host Manager's
// cache, shared with the host's controllers) to h, after the predicates,
// so that a host object — a policy, a placement — enqueues work in each
// member. Call it in a reconciler setup (a new source per member
// controller):
//
//	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
//		return ctrl.NewControllerManagedBy(mgr).
//			For(&corev1.ConfigMap{}).
//			WatchesRawSource(server.HostKind(srv, &v1.Policy{}, handler.EnqueueRequestsFromMapFunc(mapFn))).
//			Complete(r)
//	})
//
// The ctx h gets names the member whose controller the event is for. The
// source's handler is removed from the host informer when that controller
// stops (its member leaves, restarts or the Server stops), so nothing of a
// departed member is left on the host.
//
// As with every source given to WatchesRawSource (controller-runtime's
// source.Kind too), the builder's WithEventFilter does not reach it: pass
// the predicates that should filter host events here, as source.Kind
// takes them — or use Watches(HostObject(srv, obj), h), which the
// builder's predicates reach.
func HostKind(srv *Server, obj client.Object, h handler.EventHandler, preds ...predicate.Predicate) source.SyncingSource {
	return &hostKind{srv: srv, obj: obj, h: h, preds: preds, started: make(chan struct{})}
}

type hostKind struct {
	srv   *Server
	obj   client.Object
	h     handler.EventHandler
	preds []predicate.Predicate
	once  sync.Once

	started chan struct{} // closed once Start has registered (or failed)
	reg     toolscache.ResourceEventHandlerRegistration
	err     error
}

func (k *hostKind) String() string { return fmt.Sprintf("host kind source: %T", k.obj) }

// Start adds the source's handler to the host informer of the kind; it is
// removed when ctx ends.
func (k *hostKind) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if k.srv == nil || k.obj == nil || k.h == nil {
		return errors.New("server.HostKind: the Server, object and handler must not be nil")
	}
	first := false
	k.once.Do(func() { first = true })
	if !first {
		return errSourceStarted
	}
	defer close(k.started)
	inf, err := k.srv.host.GetCache().GetInformer(ctx, k.obj, cache.BlockUntilSynced(false))
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
