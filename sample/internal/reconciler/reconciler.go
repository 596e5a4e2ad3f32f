// Package reconciler holds the reconciler every sample runs. It is an
// ordinary controller-runtime reconciler, written exactly as it would be
// for a single cluster: a struct embedding client.Client, Reconcile(ctx,
// req) and SetupWithManager. Under mccr it runs once per member cluster;
// the only multi-cluster line in it reads the cluster's name from ctx,
// and only to write it down.
//
// What it does is small and easy to check from outside: every ConfigMap
// labelled sample.mccr.dev/enabled=true gets the annotation
// sample.mccr.dev/seen-in=<cluster name>. Unlabelled ConfigMaps are never
// touched, so pointing a sample at a real cluster changes nothing else.
//
//	kubectl label configmap my-config sample.mccr.dev/enabled=true
//	kubectl get configmap my-config -o jsonpath='{.metadata.annotations}'
package reconciler

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/mccr-dev/mccr/known"
)

const (
	// EnabledLabel opts a ConfigMap in: only ConfigMaps with this label set
	// to "true" are reconciled.
	EnabledLabel = "sample.mccr.dev/enabled"

	// SeenInAnnotation is written on each opted-in ConfigMap: the name of
	// the cluster the reconciler found it in.
	SeenInAnnotation = "sample.mccr.dev/seen-in"
)

// ConfigMapReconciler stamps opted-in ConfigMaps with the name of their
// cluster.
type ConfigMapReconciler struct {
	// Client is the mccr fan-out client (server.GetClient): each call goes
	// to the cluster named in its ctx. With a plain ctrl.Manager it would
	// be mgr.GetClient(); nothing below would change.
	client.Client
	Scheme *runtime.Scheme

	// Stamped, when set, is called after a ConfigMap was annotated. The
	// samples leave it nil; `make demo` uses it to tell what happened.
	Stamped func(cluster string, key types.NamespacedName)
}

// Reconcile annotates the ConfigMap req names with the name of the cluster
// it lives in, unless it already carries it.
func (r *ConfigMapReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	// mccr puts the cluster's name in ctx (known.ClusterFrom, or
	// ctx.Value(known.ClusterContext) as older code spells it).
	cluster, _ := known.ClusterFrom(ctx)

	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		// Deleted since it was queued: nothing to do.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Annotations[SeenInAnnotation] == cluster {
		return ctrl.Result{}, nil
	}

	base := cm.DeepCopy()
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[SeenInAnnotation] = cluster
	// A merge patch touches only the annotation, so it never conflicts
	// with whoever else writes the ConfigMap.
	if err := r.Patch(ctx, &cm, client.MergeFrom(base)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	log.Info("stamped ConfigMap", "seenIn", cluster)
	if r.Stamped != nil {
		r.Stamped(cluster, req.NamespacedName)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler with mgr. Hand it to
// server.AddReconcilerSetup and it runs against every member's Manager.
func (r *ConfigMapReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(enabled))).
		Named("configmap").
		Complete(r)
}

func enabled(o client.Object) bool { return o.GetLabels()[EnabledLabel] == "true" }
