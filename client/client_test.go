package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/test"
)

func in(cluster string) context.Context { return known.WithCluster(context.Background(), cluster) }

// state reads ConfigMap ns/name in every member with the admin client:
// cluster → its data, absent where the object does not exist.
func state(t *testing.T, ns, name string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, c := range members {
		if cm := adminGet(t, c, ns, name); cm != nil {
			if _, ok := cm.Annotations[known.ClusterAnnotation]; ok {
				t.Errorf("%s/%s in %s carries %s", ns, name, c, known.ClusterAnnotation)
			}
			out[c] = cm.Data
			if out[c] == nil {
				out[c] = map[string]string{}
			}
		}
	}
	return out
}

// changedOnlyIn checks that key has value v in cluster and is absent
// everywhere else the object exists.
func changedOnlyIn(t *testing.T, ns, name, cluster, key, v string) {
	t.Helper()
	for c, data := range state(t, ns, name) {
		got, ok := data[key]
		switch {
		case c == cluster && got != v:
			t.Errorf("%s: %s=%q in %s, want %q", name, key, got, c, v)
		case c != cluster && ok:
			t.Errorf("%s: %s=%q leaked into %s (the call was for %s)", name, key, got, c, cluster)
		}
	}
}

// cachedGet polls the fan-out client's (cached) Get until cond holds.
func cachedGet(t *testing.T, c crclient.Client, cluster string, key crclient.ObjectKey, obj crclient.Object, cond func() bool) {
	t.Helper()
	test.Eventually(t, 20*time.Second, "cached "+key.String()+" in "+cluster, func() bool {
		err := c.Get(in(cluster), key, obj)
		return err == nil && (cond == nil || cond())
	})
}

func TestEveryMethodGoesToTheClusterInContext(t *testing.T) {
	srv := sharedServer(t)
	c := srv.GetClient()
	ns := testNamespace(t)
	bg := context.Background()

	t.Run("Create", func(t *testing.T) {
		for _, cl := range members {
			if err := c.Create(in(cl), configMap(ns, "created-in-"+cl, map[string]string{"by": cl})); err != nil {
				t.Fatal(err)
			}
		}
		for _, cl := range members {
			got := state(t, ns, "created-in-"+cl)
			if len(got) != 1 || got[cl]["by"] != cl {
				t.Errorf("created-in-%s exists in %v, want only %s", cl, got, cl)
			}
		}
	})

	// The same name in every cluster, so that a write landing in the wrong
	// one shows.
	for _, cl := range members {
		adminCreate(t, cl, configMap(ns, "obj", map[string]string{"v": "orig"}))
	}
	key := crclient.ObjectKey{Namespace: ns, Name: "obj"}

	t.Run("Get", func(t *testing.T) {
		var cm corev1.ConfigMap
		cachedGet(t, c, "c1", crclient.ObjectKey{Namespace: ns, Name: "created-in-c1"}, &cm, nil)
		if cm.Data["by"] != "c1" {
			t.Errorf("Get in c1 = %v", cm.Data)
		}
		for _, cl := range []string{"c2", "c3"} {
			if err := c.Get(in(cl), crclient.ObjectKey{Namespace: ns, Name: "created-in-c1"}, &cm); !apierrors.IsNotFound(err) {
				t.Errorf("Get of c1's object in %s = %v, want NotFound", cl, err)
			}
		}
		for _, cl := range members {
			cachedGet(t, c, cl, key, &cm, nil)
		}
	})

	t.Run("List", func(t *testing.T) {
		var list corev1.ConfigMapList
		test.Eventually(t, 20*time.Second, "c2 lists its objects", func() bool {
			err := c.List(in("c2"), &list, crclient.InNamespace(ns))
			return err == nil && len(list.Items) == 2
		})
		for _, it := range list.Items {
			if it.Name != "obj" && it.Name != "created-in-c2" {
				t.Errorf("List in c2 returned %s", it.Name)
			}
			if _, ok := it.Annotations[known.ClusterAnnotation]; ok {
				t.Errorf("a one-cluster List annotated %s", it.Name)
			}
		}
	})

	t.Run("Update", func(t *testing.T) {
		var cm corev1.ConfigMap
		cachedGet(t, c, "c1", key, &cm, nil)
		cm.Data["updated"] = "yes"
		if err := c.Update(in("c1"), &cm); err != nil {
			t.Fatal(err)
		}
		changedOnlyIn(t, ns, "obj", "c1", "updated", "yes")
	})

	t.Run("Patch/merge", func(t *testing.T) {
		var base corev1.ConfigMap
		cachedGet(t, c, "c2", key, &base, nil)
		cm := base.DeepCopy()
		cm.Data["merge"] = "yes"
		if err := c.Patch(in("c2"), cm, crclient.MergeFrom(&base)); err != nil {
			t.Fatal(err)
		}
		changedOnlyIn(t, ns, "obj", "c2", "merge", "yes")
	})

	t.Run("Patch/apply", func(t *testing.T) {
		// client.Apply as a patch type is deprecated in favour of
		// Client.Apply but still served; it must route like any patch.
		cm := &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "obj", Namespace: ns},
			Data:       map[string]string{"ssa-patch": "yes"},
		}
		//nolint:staticcheck // the deprecated patch type is what is tested
		if err := c.Patch(in("c3"), cm, crclient.Apply, crclient.FieldOwner("mccr-test-patch"), crclient.ForceOwnership); err != nil {
			t.Fatal(err)
		}
		changedOnlyIn(t, ns, "obj", "c3", "ssa-patch", "yes")
	})

	t.Run("Apply", func(t *testing.T) {
		ac := corev1ac.ConfigMap("obj", ns).WithData(map[string]string{"applied": "yes"})
		if err := c.Apply(in("c1"), ac, crclient.FieldOwner("mccr-test-apply")); err != nil {
			t.Fatal(err)
		}
		changedOnlyIn(t, ns, "obj", "c1", "applied", "yes")
		// The original data, owned by another manager, is kept everywhere.
		for cl, data := range state(t, ns, "obj") {
			if data["v"] != "orig" {
				t.Errorf("obj in %s lost v: %v", cl, data)
			}
		}
	})

	t.Run("Delete", func(t *testing.T) {
		if err := c.Delete(in("c2"), configMap(ns, "obj", nil)); err != nil {
			t.Fatal(err)
		}
		got := state(t, ns, "obj")
		if _, ok := got["c2"]; ok || len(got) != 2 {
			t.Errorf("after Delete in c2, obj exists in %v, want c1 and c3", got)
		}
	})

	t.Run("DeleteAllOf", func(t *testing.T) {
		for _, cl := range members {
			for _, n := range []string{"bulk-1", "bulk-2"} {
				cm := configMap(ns, n, nil)
				cm.Labels = map[string]string{"bulk": "yes"}
				adminCreate(t, cl, cm)
			}
		}
		if err := c.DeleteAllOf(in("c3"), &corev1.ConfigMap{}, crclient.InNamespace(ns), crclient.MatchingLabels{"bulk": "yes"}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"bulk-1", "bulk-2"} {
			got := state(t, ns, n)
			if _, ok := got["c3"]; ok || len(got) != 2 {
				t.Errorf("after DeleteAllOf in c3, %s exists in %v, want c1 and c2", n, got)
			}
		}
	})

	t.Run("Create strips the cluster annotation", func(t *testing.T) {
		cm := configMap(ns, "copied", map[string]string{"k": "v"})
		cm.Annotations = map[string]string{known.ClusterAnnotation: "c1", "keep": "me"}
		if err := c.Create(in("c2"), cm); err != nil {
			t.Fatal(err)
		}
		got := adminGet(t, "c2", ns, "copied")
		if got == nil || got.Annotations["keep"] != "me" {
			t.Fatalf("copied in c2 = %v", got)
		}
		// state checks that no member stores the annotation.
		if s := state(t, ns, "copied"); len(s) != 1 {
			t.Errorf("copied exists in %v", s)
		}
	})

	t.Run("status subresource", func(t *testing.T) {
		// Deployments have a status subresource, and nothing in these API
		// servers (no controller manager) writes it but us.
		for _, cl := range members {
			if err := c.Create(in(cl), deployment(ns, "web")); err != nil {
				t.Fatal(err)
			}
		}
		dkey := crclient.ObjectKey{Namespace: ns, Name: "web"}
		reasons := func() map[string]string {
			out := map[string]string{}
			for _, cl := range members {
				var d appsv1.Deployment
				if err := admin(t, cl).Get(bg, dkey, &d); err != nil {
					t.Fatal(err)
				}
				for _, cond := range d.Status.Conditions {
					if cond.Type == "MccrTest" {
						out[cl] = cond.Reason
					}
				}
				if d.Status.CollisionCount != nil {
					out[cl+"/collisions"] = "set"
				}
			}
			return out
		}
		want := map[string]string{}
		check := func(step string) {
			t.Helper()
			got := reasons()
			if len(got) != len(want) {
				t.Errorf("after %s: conditions %v, want %v", step, got, want)
				return
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("after %s: conditions %v, want %v", step, got, want)
					return
				}
			}
		}
		withCondition := func(d *appsv1.Deployment, reason string) {
			d.Status.Conditions = append(d.Status.Conditions, appsv1.DeploymentCondition{
				Type: "MccrTest", Status: corev1.ConditionTrue, Reason: reason, Message: "set by mccr's tests",
			})
		}

		// Status().Update in c1.
		var d appsv1.Deployment
		cachedGet(t, c, "c1", dkey, &d, nil)
		withCondition(&d, "StatusUpdate")
		if err := c.Status().Update(in("c1"), &d); err != nil {
			t.Fatal(err)
		}
		want["c1"] = "StatusUpdate"
		check("Status().Update in c1")

		// SubResource("status").Update in c2.
		cachedGet(t, c, "c2", dkey, &d, nil)
		withCondition(&d, "SubResourceUpdate")
		if err := c.SubResource("status").Update(in("c2"), &d); err != nil {
			t.Fatal(err)
		}
		want["c2"] = "SubResourceUpdate"
		check("SubResource(status).Update in c2")

		// SubResource("status").Patch in c3.
		cachedGet(t, c, "c3", dkey, &d, nil)
		base := d.DeepCopy()
		withCondition(&d, "SubResourcePatch")
		if err := c.SubResource("status").Patch(in("c3"), &d, crclient.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		want["c3"] = "SubResourcePatch"
		check("SubResource(status).Patch in c3")

		// Status().Patch in c2.
		cachedGet(t, c, "c2", dkey, &d, func() bool { return len(d.Status.Conditions) > 0 })
		base = d.DeepCopy()
		d.Status.CollisionCount = ptr.To[int32](3)
		if err := c.Status().Patch(in("c2"), &d, crclient.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		want["c2/collisions"] = "set"
		check("Status().Patch in c2")

		// SubResource("status").Get reads from the API server of the
		// cluster in ctx (subresources are never cached).
		for _, cl := range members {
			var got appsv1.Deployment
			if err := c.SubResource("status").Get(in(cl), deployment(ns, "web"), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Reason != want[cl] {
				t.Errorf("SubResource(status).Get in %s = %+v, want reason %s", cl, got.Status.Conditions, want[cl])
			}
		}
	})
}

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c:1"}}},
			},
		},
	}
}

// singleClusterCalls is one call of every method that needs a single
// cluster, each to be made with a given ctx.
func singleClusterCalls(c crclient.Client, ns string) map[string]func(context.Context) error {
	cm := func() *corev1.ConfigMap { return configMap(ns, "any", nil) }
	key := crclient.ObjectKey{Namespace: ns, Name: "any"}
	ac := func() *corev1ac.ConfigMapApplyConfiguration { return corev1ac.ConfigMap("any", ns) }
	return map[string]func(context.Context) error{
		"Get":                  func(ctx context.Context) error { return c.Get(ctx, key, cm()) },
		"Create":               func(ctx context.Context) error { return c.Create(ctx, cm()) },
		"Update":               func(ctx context.Context) error { return c.Update(ctx, cm()) },
		"Patch":                func(ctx context.Context) error { return c.Patch(ctx, cm(), crclient.MergeFrom(cm())) },
		"Apply":                func(ctx context.Context) error { return c.Apply(ctx, ac(), crclient.FieldOwner("t")) },
		"Delete":               func(ctx context.Context) error { return c.Delete(ctx, cm()) },
		"DeleteAllOf":          func(ctx context.Context) error { return c.DeleteAllOf(ctx, cm(), crclient.InNamespace(ns)) },
		"Status().Update":      func(ctx context.Context) error { return c.Status().Update(ctx, cm()) },
		"Status().Patch":       func(ctx context.Context) error { return c.Status().Patch(ctx, cm(), crclient.MergeFrom(cm())) },
		"Status().Create":      func(ctx context.Context) error { return c.Status().Create(ctx, cm(), cm()) },
		"Status().Apply":       func(ctx context.Context) error { return c.Status().Apply(ctx, ac(), crclient.FieldOwner("t")) },
		"SubResource().Get":    func(ctx context.Context) error { return c.SubResource("status").Get(ctx, cm(), cm()) },
		"SubResource().Create": func(ctx context.Context) error { return c.SubResource("status").Create(ctx, cm(), cm()) },
		"SubResource().Update": func(ctx context.Context) error { return c.SubResource("status").Update(ctx, cm()) },
		"SubResource().Patch": func(ctx context.Context) error {
			return c.SubResource("status").Patch(ctx, cm(), crclient.MergeFrom(cm()))
		},
		"SubResource().Apply": func(ctx context.Context) error {
			return c.SubResource("status").Apply(ctx, ac(), crclient.FieldOwner("t"))
		},
	}
}

func TestCallsWithoutAClusterFail(t *testing.T) {
	srv := sharedServer(t)
	calls := singleClusterCalls(srv.GetClient(), "default")
	bg := context.Background()
	for name, call := range calls {
		// No cluster at all; a cluster cleared by WithClusters (which aims
		// fleet-wide reads only); an empty name.
		for what, ctx := range map[string]context.Context{
			"no cluster":     bg,
			"WithClusters":   known.WithClusters(in("c1"), "c1"),
			"empty WithName": known.WithCluster(bg, ""),
		} {
			err := call(ctx)
			if !errors.Is(err, mcclient.ErrNoClusterInContext) {
				t.Errorf("%s with %s = %v, want ErrNoClusterInContext", name, what, err)
				continue
			}
			if !strings.Contains(err.Error(), "known.WithCluster") {
				t.Errorf("%s: error %q does not say how to name a cluster", name, err)
			}
		}
		err := call(in("no-such-cluster"))
		if !errors.Is(err, mcclient.ErrClusterNotFound) || !strings.Contains(err.Error(), `"no-such-cluster"`) {
			t.Errorf("%s in an unknown cluster = %v, want ErrClusterNotFound naming it", name, err)
		}
	}
	// List names its cluster the same way; without one it spans the fleet.
	var list corev1.ConfigMapList
	if err := srv.GetClient().List(in("no-such-cluster"), &list); !errors.Is(err, mcclient.ErrClusterNotFound) {
		t.Errorf("List in an unknown cluster = %v, want ErrClusterNotFound", err)
	}
	if _, err := srv.GetClient().For(bg); !errors.Is(err, mcclient.ErrNoClusterInContext) {
		t.Errorf("For(no cluster) = %v", err)
	}
	if cl, err := srv.GetClient().For(in("c2")); err != nil || cl == nil {
		t.Errorf("For(c2) = %v, %v", cl, err)
	}
}

// mirrorReconciler is an ordinary reconciler that writes across clusters:
// for a ConfigMap labelled mirror-to=<cluster>, it creates <name>-mirror
// there, recording where it came from.
type mirrorReconciler struct {
	crclient.Client
}

func (r *mirrorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, crclient.IgnoreNotFound(err)
	}
	from, _ := known.ClusterFrom(ctx)
	to := known.WithCluster(ctx, cm.Labels["mirror-to"])
	mirror := configMap(req.Namespace, req.Name+"-mirror", map[string]string{"from": from})
	if err := r.Create(to, mirror); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

func (r *mirrorReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("mirror").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o crclient.Object) bool {
			_, ok := o.GetLabels()["mirror-to"]
			return ok
		}))).
		Complete(r)
}

func TestCrossClusterWriteFromAReconcile(t *testing.T) {
	srv := sharedServer(t)
	ns := testNamespace(t)
	cm := configMap(ns, "source", nil)
	cm.Labels = map[string]string{"mirror-to": "c3"}
	adminCreate(t, "c1", cm)
	test.Eventually(t, 20*time.Second, "mirror in c3", func() bool { return adminGet(t, "c3", ns, "source-mirror") != nil })
	if got := adminGet(t, "c3", ns, "source-mirror").Data["from"]; got != "c1" {
		t.Errorf("mirror says it came from %q, want c1", got)
	}
	for _, cl := range []string{"c1", "c2"} {
		if adminGet(t, cl, ns, "source-mirror") != nil {
			t.Errorf("mirror written to %s too", cl)
		}
	}

	// The same without a reconciler: a ctx of c1 re-aimed at c2.
	ctx := known.WithCluster(in("c1"), "c2")
	if err := srv.GetClient().Create(ctx, configMap(ns, "retargeted", nil)); err != nil {
		t.Fatal(err)
	}
	if s := state(t, ns, "retargeted"); len(s) != 1 || s["c2"] == nil {
		t.Errorf("retargeted exists in %v, want c2 only", s)
	}
}

func TestSchemeAndMapperNeedNoCluster(t *testing.T) {
	srv := sharedServer(t)
	c := srv.GetClient()
	if c.Scheme() != srv.GetScheme() {
		t.Error("Scheme() is not the Server's shared scheme")
	}
	// The host's mapper answers what it knows.
	host, err := srv.GetHostManager().GetRESTMapper().RESTMapping(corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.RESTMapper().RESTMapping(host.GroupVersionKind.GroupKind(), "v1"); err != nil || *got != *host {
		t.Errorf("RESTMapper() maps ConfigMap as %v, %v; the host's mapper as %v", got, err, host)
	}
	gvk, err := c.GroupVersionKindFor(&corev1.ConfigMap{})
	if err != nil || gvk != corev1.SchemeGroupVersion.WithKind("ConfigMap") {
		t.Errorf("GroupVersionKindFor(ConfigMap) = %v, %v", gvk, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	if gvk, err := c.GroupVersionKindFor(u); err != nil || gvk.Kind != "Widget" {
		t.Errorf("GroupVersionKindFor(unstructured) = %v, %v", gvk, err)
	}
	for obj, want := range map[crclient.Object]bool{&corev1.ConfigMap{}: true, &corev1.Namespace{}: false, &appsv1.Deployment{}: true} {
		got, err := c.IsObjectNamespaced(obj)
		if err != nil || got != want {
			t.Errorf("IsObjectNamespaced(%T) = %v, %v; want %v", obj, got, err, want)
		}
	}
}
