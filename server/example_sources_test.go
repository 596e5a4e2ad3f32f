package server_test

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
)

// A host controller that keeps a summary of every member's ConfigMaps named
// "status": each change in any member, and each member joining or leaving,
// enqueues the one summary object on the host.
func ExampleFleetKind() {
	var srv *server.Server // from server.NewServer
	summary := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "fleet-system", Name: "summary"}}
	err := ctrl.NewControllerManagedBy(srv.GetHostManager()).
		Named("fleet-summary").
		WatchesRawSource(server.FleetKind(srv, &corev1.ConfigMap{},
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				cluster, _ := known.ClusterFrom(ctx) // the member the event came from
				if o.GetName() != "status" || cluster == "" {
					return nil
				}
				return []reconcile.Request{summary}
			}))).
		WatchesRawSource(server.ClusterEvents(srv, func(context.Context, server.ClusterEvent) []reconcile.Request {
			return []reconcile.Request{summary}
		})).
		Complete(reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
			// List the "status" ConfigMaps of every member with
			// srv.GetClient() and write the summary on the host.
			return reconcile.Result{}, nil
		}))
	if err != nil {
		panic(err)
	}
}

// A member controller driven by a host object: each change of a host
// ConfigMap in "policies" is reconciled in every member, which applies it
// there.
func ExampleHostKind() {
	var srv *server.Server // from server.NewServer
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).
			Named("apply-policies").
			WatchesRawSource(server.HostKind(srv, &corev1.ConfigMap{},
				handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
					if o.GetNamespace() != "policies" {
						return nil
					}
					return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
				}))).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				cluster, _ := known.ClusterFrom(ctx) // the member to apply it in
				_ = cluster
				return reconcile.Result{}, nil
			}))
	})
}
