package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/leaninformer"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/test"
)

// listedFrom lists ns in cluster across the fleet (known.WithClusters), as
// a reconciler of the fleet does, until the list holds n items, each
// marked with known.ClusterAnnotation.
func listedFrom(t *testing.T, c crclient.Client, cluster, ns string, list crclient.ObjectList, n int) {
	t.Helper()
	test.Eventually(t, 20*time.Second, fmt.Sprintf("%d items listed in %s", n, cluster), func() bool {
		err := c.List(known.WithClusters(context.Background(), cluster), list, crclient.InNamespace(ns))
		return err == nil && meta.LenList(list) == n
	})
	err := meta.EachListItem(list, func(obj runtime.Object) error {
		if m, _ := meta.Accessor(obj); m.GetAnnotations()[known.ClusterAnnotation] != cluster {
			return fmt.Errorf("listed %s is not marked: %v", m.GetName(), m.GetAnnotations())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// annotate sets an annotation of another actor on a ConfigMap in cluster,
// on the API server, after the fan-out client listed it.
func annotate(t *testing.T, cluster, ns, name string) {
	t.Helper()
	live := adminGet(t, cluster, ns, name)
	live.Annotations = map[string]string{"owner.example/keep": "me"}
	if err := admin(t, cluster).Update(context.Background(), live); err != nil {
		t.Fatal(err)
	}
}

// TestPatchOfAListedItemMentionsNoClusterAnnotation: a patch computed from
// an item of a fleet-wide List, of whichever type, neither stores
// known.ClusterAnnotation nor, by its absence from the API server's copy,
// removes the annotations the caller did not change.
func TestPatchOfAListedItemMentionsNoClusterAnnotation(t *testing.T) {
	srv := sharedServer(t)
	c := srv.GetClient()
	ns := testNamespace(t)
	bg := context.Background()
	const cl = "c1"
	kinds := map[string]func(item *corev1.ConfigMap) crclient.Patch{
		"mergefrom": func(item *corev1.ConfigMap) crclient.Patch {
			base := item.DeepCopy()
			item.Data["b"] = "2"
			return crclient.MergeFrom(base)
		},
		// The other actor's change comes before the List here: after it,
		// the optimistic lock refuses the patch, as it should.
		"optimistic-lock": func(item *corev1.ConfigMap) crclient.Patch {
			base := item.DeepCopy()
			item.Data["b"] = "2"
			return crclient.MergeFromWithOptions(base, crclient.MergeFromWithOptimisticLock{})
		},
		"strategic": func(item *corev1.ConfigMap) crclient.Patch {
			base := item.DeepCopy()
			item.Data["b"] = "2"
			return crclient.StrategicMergeFrom(base)
		},
		// A JSON patch that removes the annotation from the listed item
		// it was made from: the API server's copy has none to remove.
		"json-patch": func(*corev1.ConfigMap) crclient.Patch {
			return crclient.RawPatch(types.JSONPatchType, []byte(
				`[{"op":"remove","path":"/metadata/annotations/mccr.dev~1cluster"},{"op":"add","path":"/data/b","value":"2"}]`))
		},
	}
	for name := range kinds {
		cm := configMap(ns, "cm-"+name, map[string]string{"a": "1"})
		if name == "optimistic-lock" {
			cm.Annotations = map[string]string{"owner.example/keep": "me"}
		}
		adminCreate(t, cl, cm)
	}
	var list corev1.ConfigMapList
	listedFrom(t, c, cl, ns, &list, len(kinds))
	for _, item := range list.Items {
		if item.Name != "cm-optimistic-lock" {
			annotate(t, cl, ns, item.Name)
		}
	}
	for i := range list.Items {
		item := &list.Items[i]
		name := item.Name[len("cm-"):]
		t.Run(name, func(t *testing.T) {
			patch := kinds[name](item)
			if err := c.Patch(known.WithCluster(bg, cl), item, patch); err != nil {
				t.Fatalf("Patch = %v", err)
			}
			got := adminGet(t, cl, ns, item.Name)
			if got.Data["b"] != "2" {
				t.Errorf("the patch did not land: %v", got.Data)
			}
			if got.Annotations["owner.example/keep"] != "me" {
				t.Errorf("the patch removed another actor's annotation: annotations now %v", got.Annotations)
			}
			if v, ok := got.Annotations[known.ClusterAnnotation]; ok {
				t.Errorf("the patch stored %s=%q", known.ClusterAnnotation, v)
			}
			// obj holds the API server's answer, as with controller-runtime.
			if item.Annotations["owner.example/keep"] != "me" || item.ResourceVersion != got.ResourceVersion {
				t.Errorf("obj after the Patch = %v (rv %s), want the API server's %v (rv %s)",
					item.Annotations, item.ResourceVersion, got.Annotations, got.ResourceVersion)
			}
		})
	}

	t.Run("Status", func(t *testing.T) {
		d := deployment(ns, "d")
		if err := admin(t, cl).Create(bg, d); err != nil {
			t.Fatal(err)
		}
		var deps appsv1.DeploymentList
		listedFrom(t, c, cl, ns, &deps, 1)
		item := &deps.Items[0]
		d.Annotations = map[string]string{"owner.example/keep": "me"}
		if err := admin(t, cl).Update(bg, d); err != nil {
			t.Fatal(err)
		}
		base := item.DeepCopy()
		item.Status.ObservedGeneration = 7
		if err := c.Status().Patch(known.WithCluster(bg, cl), item, crclient.MergeFrom(base)); err != nil {
			t.Fatalf("Status().Patch = %v", err)
		}
		var got appsv1.Deployment
		if err := admin(t, cl).Get(bg, crclient.ObjectKeyFromObject(d), &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.ObservedGeneration != 7 {
			t.Errorf("the status patch did not land: %+v", got.Status)
		}
		if got.Annotations["owner.example/keep"] != "me" {
			t.Errorf("the status patch removed another actor's annotation: annotations now %v", got.Annotations)
		}
		if v, ok := got.Annotations[known.ClusterAnnotation]; ok {
			t.Errorf("the status patch stored %s=%q", known.ClusterAnnotation, v)
		}
	})
}

// TestApplyOfAListedItemDoesNotStoreClusterAnnotation: an apply
// configuration made from a listed item (or given the annotation) is
// applied without it, and the caller's configuration is not changed to
// send it.
func TestApplyOfAListedItemDoesNotStoreClusterAnnotation(t *testing.T) {
	srv := sharedServer(t)
	c := srv.GetClient()
	ns := testNamespace(t)
	bg := context.Background()
	const cl = "c2"
	stored := func(t *testing.T, obj crclient.Object) {
		t.Helper()
		if err := admin(t, cl).Get(bg, crclient.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		if v, ok := obj.GetAnnotations()[known.ClusterAnnotation]; ok {
			t.Errorf("Apply stored %s=%q", known.ClusterAnnotation, v)
		}
		if obj.GetAnnotations()["mine"] != "1" {
			t.Errorf("Apply did not store the caller's annotation: %v", obj.GetAnnotations())
		}
	}

	t.Run("Unstructured", func(t *testing.T) {
		adminCreate(t, cl, configMap(ns, "u", map[string]string{"a": "1"}))
		var list unstructured.UnstructuredList
		list.SetAPIVersion("v1")
		list.SetKind("ConfigMapList")
		listedFrom(t, c, cl, ns, &list, 1)
		item := list.Items[0]
		unstructured.RemoveNestedField(item.Object, "metadata", "managedFields")
		unstructured.RemoveNestedField(item.Object, "metadata", "resourceVersion")
		a := item.GetAnnotations()
		a["mine"] = "1"
		item.SetAnnotations(a)
		if err := c.Apply(known.WithCluster(bg, cl), crclient.ApplyConfigurationFromUnstructured(&item),
			crclient.FieldOwner("test"), crclient.ForceOwnership); err != nil {
			t.Fatalf("Apply = %v", err)
		}
		stored(t, configMap(ns, "u", nil))
		// The caller's object holds the API server's answer, as with
		// controller-runtime.
		if item.GetResourceVersion() == "" {
			t.Errorf("the applied object did not get the answer: %v", item.Object["metadata"])
		}
	})

	t.Run("Typed", func(t *testing.T) {
		ac := corev1ac.ConfigMap("t", ns).
			WithAnnotations(map[string]string{known.ClusterAnnotation: cl, "mine": "1"}).
			WithData(map[string]string{"a": "1"})
		if err := c.Apply(known.WithCluster(bg, cl), ac, crclient.FieldOwner("test")); err != nil {
			t.Fatalf("Apply = %v", err)
		}
		stored(t, configMap(ns, "t", nil))
		if ac.Annotations[known.ClusterAnnotation] != cl {
			t.Errorf("Apply changed the caller's configuration: annotations %v", ac.Annotations)
		}
		if ac.ResourceVersion == nil {
			t.Error("the apply configuration did not get the answer")
		}
	})

	t.Run("Status", func(t *testing.T) {
		if err := admin(t, cl).Create(bg, deployment(ns, "d")); err != nil {
			t.Fatal(err)
		}
		ac := appsv1ac.Deployment("d", ns).
			WithAnnotations(map[string]string{known.ClusterAnnotation: cl, "mine": "1"}).
			WithStatus(appsv1ac.DeploymentStatus().WithObservedGeneration(7))
		if err := c.Status().Apply(known.WithCluster(bg, cl), ac, crclient.FieldOwner("test")); err != nil {
			t.Fatalf("Status().Apply = %v", err)
		}
		var got appsv1.Deployment
		if err := admin(t, cl).Get(bg, crclient.ObjectKey{Namespace: ns, Name: "d"}, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.ObservedGeneration != 7 {
			t.Errorf("the status apply did not land: %+v", got.Status)
		}
		if v, ok := got.Annotations[known.ClusterAnnotation]; ok {
			t.Errorf("Status().Apply stored %s=%q", known.ClusterAnnotation, v)
		}
	})
}

// TestReadYourWritesAfterApplyOfMarkedConfiguration: with read-your-writes
// on, a typed Get right after a typed Apply of a configuration carrying a
// listed item's annotations (known.ClusterAnnotation among them) sees the
// Apply, as after any other Apply: the configuration is sent typed, so the
// member's client records the write for the kind the Get waits on, and
// the member starts no unstructured informer for it.
func TestReadYourWritesAfterApplyOfMarkedConfiguration(t *testing.T) {
	ns := testNamespace(t)
	adminCreate(t, "c1", configMap(ns, "cm", map[string]string{"v": "0"}))
	o := serverOptions(testr.NewWithInterface(t, testr.Options{Verbosity: 0}), ns)
	o.Client.Cache = &crclient.CacheOptions{EnableReadYourWritesConsistency: ptr.To(true)}
	var mu sync.Mutex
	var informers []string
	o.Cache.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		mu.Lock()
		informers = append(informers, fmt.Sprintf("%T %s", obj, obj.GetObjectKind().GroupVersionKind().Kind))
		mu.Unlock()
		return leaninformer.New(lw, obj, resync, idx)
	}
	srv := startServerWith(t, o, named("c1", "c1"))
	waitReady(t, srv, "c1")
	c := srv.GetClient()
	ctx := known.WithCluster(context.Background(), "c1")
	key := crclient.ObjectKey{Namespace: ns, Name: "cm"}

	var list corev1.ConfigMapList
	listedFrom(t, c, "c1", ns, &list, 1)
	item := list.Items[0]

	const n = 50
	stale := 0
	for i := range n {
		v := fmt.Sprint(i + 1)
		ac := corev1ac.ConfigMap("cm", ns).WithAnnotations(item.Annotations).WithData(map[string]string{"v": v})
		if err := c.Apply(ctx, ac, crclient.FieldOwner("test"), crclient.ForceOwnership); err != nil {
			t.Fatal(err)
		}
		if ac.Annotations[known.ClusterAnnotation] != "c1" || ac.ResourceVersion == nil {
			t.Fatalf("the caller's configuration: annotations %v, resourceVersion %v; want it as given, with the answer", ac.Annotations, ac.ResourceVersion)
		}
		var got corev1.ConfigMap
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		if got.Data["v"] != v {
			stale++
		}
		if _, ok := got.Annotations[known.ClusterAnnotation]; ok {
			t.Fatalf("Apply stored %s", known.ClusterAnnotation)
		}
	}
	if stale > 0 {
		t.Errorf("%d of %d Gets right after an Apply of a listed item's annotations returned the old data", stale, n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, i := range informers {
		if strings.HasPrefix(i, "*unstructured.") {
			t.Errorf("the member started an unstructured informer: %v", informers)
			break
		}
	}
}
