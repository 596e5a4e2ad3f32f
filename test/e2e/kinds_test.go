package e2e

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A real operator watches more than the kind it reconciles: it is For one
// kind and Owns what it makes of it (a Deployment, a Service, a Secret, RBAC,
// a Job…), each owned kind mapped back to its owner's request. Every kind a
// controller watches is one more informer per cluster, so what a cluster
// costs grows with the kinds; the fleet benchmark measures it with the
// controller on ConfigMaps alone (kinds=1) and with nine owned kinds more
// (kinds=10), the same in both engines.

// ownedKinds are the nine kinds the controller Owns at kinds=10, each with
// the one object of that kind the benchmark's namespace holds.
var ownedKinds = []struct {
	// watched is the empty object the controller Owns.
	watched client.Object
	// object is the namespace's one object of the kind.
	object func() client.Object
}{
	{&corev1.Secret{}, func() client.Object {
		return &corev1.Secret{StringData: map[string]string{"key": "value"}}
	}},
	{&corev1.Service{}, func() client.Object {
		return &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	}},
	{&corev1.ServiceAccount{}, func() client.Object { return &corev1.ServiceAccount{} }},
	// No node runs it: a Pod exists in the API server without one.
	{&corev1.Pod{}, func() client.Object { return &corev1.Pod{Spec: podSpec(corev1.RestartPolicyAlways)} }},
	{&appsv1.Deployment{}, func() client.Object {
		return &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Selector: ownedSelector(), Template: podTemplate(corev1.RestartPolicyAlways)}}
	}},
	{&appsv1.StatefulSet{}, func() client.Object {
		return &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Selector: ownedSelector(), Template: podTemplate(corev1.RestartPolicyAlways)}}
	}},
	{&batchv1.Job{}, func() client.Object {
		return &batchv1.Job{Spec: batchv1.JobSpec{Template: podTemplate(corev1.RestartPolicyNever)}}
	}},
	{&rbacv1.Role{}, func() client.Object {
		return &rbacv1.Role{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	}},
	{&rbacv1.RoleBinding{}, func() client.Object {
		return &rbacv1.RoleBinding{
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ownedName},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ownedName}},
		}
	}},
}

// ownedName names the namespace's object of every owned kind.
const ownedName = "owned"

var ownedLabels = map[string]string{"app": ownedName}

func ownedSelector() *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: ownedLabels} }

func podSpec(restart corev1.RestartPolicy) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy:                restart,
		AutomountServiceAccountToken: ptr.To(false),
		Containers:                   []corev1.Container{{Name: "main", Image: "registry.invalid/owned:1"}},
	}
}

func podTemplate(restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: ownedLabels}, Spec: podSpec(restart)}
}

// kindsController sets up the benchmark's controller in mgr: For
// ConfigMaps (with forOpts), and at kinds > 1 Owning the first kinds-1
// owned kinds, whose events go to the owning ConfigMap's request
// (controller-runtime's EnqueueRequestForOwner, as Owns sets it up).
func kindsController(mgr ctrl.Manager, kinds int, r reconcile.Reconciler, forOpts ...builder.ForOption) error {
	if kinds < 1 || kinds > len(ownedKinds)+1 {
		return fmt.Errorf("kinds=%d: the benchmark's controller watches 1 to %d kinds", kinds, len(ownedKinds)+1)
	}
	b := ctrl.NewControllerManagedBy(mgr).Named("scale").For(&corev1.ConfigMap{}, forOpts...)
	for _, k := range ownedKinds[:kinds-1] {
		b = b.Owns(k.watched)
	}
	return b.Complete(r)
}

// ownedObjects creates in ns of cluster one object of each owned kind,
// owned (as its controller) by the ConfigMap cm-0, which must exist.
// Objects that exist are kept.
func ownedObjects(tb testing.TB, cluster, ns string) {
	tb.Helper()
	ctx := context.Background()
	cl := adminClient(tb, cluster)
	var owner corev1.ConfigMap
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm-0"}, &owner); err != nil {
		tb.Fatalf("cluster %s: the owner of the owned objects: %v", cluster, err)
	}
	ref := metav1.OwnerReference{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
	}
	for _, k := range ownedKinds {
		obj := k.object()
		obj.SetNamespace(ns)
		obj.SetName(ownedName)
		obj.SetLabels(ownedLabels)
		obj.SetOwnerReferences([]metav1.OwnerReference{ref})
		if err := cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatalf("cluster %s: creating %T %s/%s: %v", cluster, obj, ns, ownedName, err)
		}
	}
}
