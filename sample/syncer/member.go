package main

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
	"github.com/mccr-dev/mccr/server"
)

// copyReconciler runs in every member: it makes the member's copy of each
// FleetSetting what the host asks for, or removes it. One value serves
// every member; the cluster is the one named in ctx.
type copyReconciler struct {
	srv *server.Server
	// host reads FleetSettings from the host's cache.
	host client.Client
	// member is the fan-out client: each call goes to the member named in
	// its ctx, reads from that member's cache.
	member client.Client

	patrolPeriod time.Duration
	drift        func(cluster string, key types.NamespacedName, why string)
	log          logr.Logger
}

// SetupWithManager builds the member's controller. Its requests are
// namespace/name keys, one per FleetSetting and its copies alike. They
// come from three sources:
//
//   - the member's own Settings, those the syncer made: a copy deleted, or
//     its spec changed, by hand is put back at once;
//   - the host's FleetSettings (server.HostKind): a change of spec, or a
//     deletion starting, reaches every member;
//   - the patroller, every PatrolPeriod: whatever differs although no
//     event said so.
//
// Metadata edits of a copy (its labels) and the status writes of the host
// controller change no generation and wake no member: the patroller
// catches the former.
func (r *copyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("setting-sync").
		For(&v1alpha1.Setting{}, builder.WithPredicates(ownCopies, predicate.GenerationChangedPredicate{})).
		WatchesRawSource(server.HostKind(r.srv, &v1alpha1.FleetSetting{}, &handler.EnqueueRequestForObject{},
			predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deletionStarts))).
		WatchesRawSource(source.Func(r.patrol)).
		Complete(r)
}

// ownCopies lets through the events of the copies the syncer made (also
// the update that takes the mark off one: it is no longer ours).
var ownCopies = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return managedObject(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return managedObject(e.Object) },
	GenericFunc: func(e event.GenericEvent) bool { return managedObject(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return managedObject(e.ObjectOld) || managedObject(e.ObjectNew)
	},
}

func managedObject(o client.Object) bool { return o.GetLabels()[managedByLabel] == managedByValue }

// deletionStarts lets through the update that marks an object deleted.
var deletionStarts = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
}

// Reconcile carries out the plan for one key in the member named in ctx.
func (r *copyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster, _ := known.ClusterFrom(ctx)
	fs, err := getOrNil[v1alpha1.FleetSetting](ctx, r.host, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	cp, err := getOrNil[v1alpha1.Setting](ctx, r.member, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	props, err := r.srv.ClusterProperties(ctx)
	if err != nil {
		return ctrl.Result{}, err // the member is leaving
	}
	act, why := plan(fs, cp, cluster, props)
	log := ctrl.LoggerFrom(ctx).WithValues("why", why) // the logger names the cluster and the key
	switch act {
	case write:
		u, err := desiredCopy(fs)
		if err != nil {
			return ctrl.Result{}, err
		}
		// Forced: a field someone else took over by hand comes back.
		err = r.member.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership)
		if err != nil {
			return ctrl.Result{}, err
		}
		log.Info("copy written", "generation", fs.Generation)
	case remove:
		// Only the copy planned for: not one made again meanwhile.
		err := r.member.Delete(ctx, cp, client.Preconditions{UID: &cp.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		log.Info("copy deleted")
	case keep:
	}
	return ctrl.Result{}, nil
}

// getOrNil reads key through c; nil when it does not exist.
func getOrNil[T any, P interface {
	*T
	client.Object
}](ctx context.Context, c client.Client, key types.NamespacedName) (P, error) {
	obj := P(new(T))
	if err := c.Get(ctx, key, obj); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return obj, nil
}

// patrol is the controller's periodic source: every PatrolPeriod it
// compares, for the member its ctx names, every FleetSetting on the host
// with the member's copies (both from the caches) and queues each key
// whose plan is not keep. It repairs what no event announced: a copy's
// labels edited by hand (filtered out above), the member's properties
// changed (a Server.Update that keeps the member running tells no
// controller), an event lost on the way. It stops with the controller.
func (r *copyReconciler) patrol(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	cluster, ok := known.ClusterFrom(ctx)
	if !ok {
		return errors.New("patrol: the controller's context names no cluster")
	}
	log := r.log.WithValues("cluster", cluster)
	go func() {
		t := time.NewTicker(r.patrolPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			found, err := r.findDrift(ctx, cluster)
			if meta.IsNoMatchError(err) {
				log.V(1).Info("the cluster does not serve Setting yet; nothing to patrol")
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					log.Error(err, "patrol failed; trying again next period")
				}
				continue
			}
			for key, why := range found {
				log.Info("patrol found drift", "setting", key, "why", why)
				if r.drift != nil {
					r.drift(cluster, key, why)
				}
				q.Add(reconcile.Request{NamespacedName: key})
			}
		}
	}()
	return nil
}

// findDrift returns the keys whose plan in the cluster is not keep, and
// why.
func (r *copyReconciler) findDrift(ctx context.Context, cluster string) (map[types.NamespacedName]string, error) {
	props, err := r.srv.ClusterProperties(ctx)
	if err != nil {
		return nil, err
	}
	var settings v1alpha1.FleetSettingList
	if err := r.host.List(ctx, &settings); err != nil {
		return nil, err
	}
	var copies v1alpha1.SettingList
	if err := r.member.List(ctx, &copies); err != nil {
		return nil, err
	}
	fleetSettings := make(map[types.NamespacedName]*v1alpha1.FleetSetting, len(settings.Items))
	for i := range settings.Items {
		fleetSettings[client.ObjectKeyFromObject(&settings.Items[i])] = &settings.Items[i]
	}
	found := map[types.NamespacedName]string{}
	check := func(key types.NamespacedName, cp *v1alpha1.Setting) {
		if act, why := plan(fleetSettings[key], cp, cluster, props); act != keep {
			found[key] = why
		}
	}
	for i := range copies.Items {
		key := client.ObjectKeyFromObject(&copies.Items[i])
		check(key, &copies.Items[i])
		delete(fleetSettings, key)
	}
	for key := range fleetSettings { // those without a copy
		check(key, nil)
	}
	return found, nil
}
