package server

import (
	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mccr-dev/mccr/internal/fleetsource"
)

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
// A member that restarts (an Update, the restart that follows an outage,
// a retry after it failed) runs a new Manager, whose informer knows
// nothing of the old one's. Once that informer has delivered the objects
// the member holds, every object h was told of before and not told
// deleted, and that the new informer has not delivered, arrives as a
// delete event with DeleteStateUnknown and the object's last state — as
// controller-runtime's Kind source tells an object that vanished while
// its watch was broken — so an aggregator keyed by member object keeps no
// stale entry. For this the source keeps, per member, the last state of
// each object its informer delivered (objects the member's cache holds
// anyway) and, while the member is between Managers (Failed or
// restarting), those of the Manager that stopped, until the next one has
// synced. A member that leaves the fleet (or, with sharding, this
// replica) is told nothing more: no delete for its objects, as
// controller-runtime's Kind source tells none when its informer stops.
// ClusterEvents tells it (Left, Elsewhere); drop the member's share then.
//
// With sharding (WithSharding), a replica's sources see the members that
// replica runs: a host controller that aggregates over the whole fleet
// runs on every replica (no leader election) and each aggregates its share,
// or reads the other replicas' results.
func FleetKind(srv *Server, obj client.Object, h handler.EventHandler, preds ...predicate.Predicate) source.Source {
	if srv == nil {
		return fleetsource.FleetKind(nil, logr.Discard(), obj, h, preds...)
	}
	return fleetsource.FleetKind(&srv.feed.Feed, srv.log, obj, h, preds...)
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
//
// Neither a missing CRD nor a missing RBAC rule on the host holds up the
// member (see HostKind).
func HostObject(srv *Server, obj client.Object) client.Object {
	return fleetsource.HostObject(hostOf(srv), obj)
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
//
// A kind the host does not serve yet (its CRD not installed there) is
// waited for, as a member waits for a late CRD of its own: the member is
// Ready, its other controllers run, Status.WaitingFor names the kind with
// a " (host)" suffix, and the controller starts within seconds of the CRD
// being installed on the host, without a restart. A kind the host's
// identity may not list or watch (a 403) counts as synced for the member,
// as a member's own forbidden kind does: the member is Ready, the
// controller runs without the host's objects, Status.Unserved names the
// kind (with the suffix), and once the host Manager is granted the rule
// the objects reach the controller, without a restart.
func HostKind(srv *Server, obj client.Object, h handler.EventHandler, preds ...predicate.Predicate) source.SyncingSource {
	return fleetsource.HostKind(hostOf(srv), obj, h, preds...)
}

// hostOf is the host Manager as member controllers' sources see it; its
// cache is nil without a Server (the sources refuse to start then).
func hostOf(srv *Server) fleetsource.Host {
	if srv == nil {
		return fleetsource.Host{Log: logr.Discard()}
	}
	return fleetsource.Host{
		Cache:     srv.host.GetCache(),
		Scheme:    srv.host.GetScheme(),
		Forbidden: srv.hostForbidden,
		Mapper:    srv.hostMisses,
		Log:       srv.log.WithName("hostkind"),
	}
}
