package client

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/known"
)

// BenchmarkMarkItems measures the marking of a fleet-wide List's items
// with their cluster, for 200 items with and without annotations of their
// own, typed and unstructured. Each round marks the items as the member's
// cache handed them out: markItems leaves the maps it was given as they
// were, so a round only points the items at them again.
func BenchmarkMarkItems(b *testing.B) {
	const n = 200
	annotations := map[string]string{
		"app.kubernetes.io/managed-by":                     "bench",
		"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"ConfigMap"}`,
	}
	typed := func(a map[string]string) *corev1.ConfigMapList {
		l := &corev1.ConfigMapList{Items: make([]corev1.ConfigMap, n)}
		for i := range l.Items {
			l.Items[i] = corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("obj-%03d", i), Labels: map[string]string{"app": "bench"}, Annotations: a},
				Data:       map[string]string{"index": fmt.Sprint(i)},
			}
		}
		return l
	}
	unstructuredOf := func(l *corev1.ConfigMapList) *unstructured.UnstructuredList {
		var u unstructured.UnstructuredList
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMapList")
		for i := range l.Items {
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&l.Items[i])
			if err != nil {
				b.Fatal(err)
			}
			u.Items = append(u.Items, unstructured.Unstructured{Object: content})
		}
		return &u
	}
	for _, bc := range []struct {
		name string
		list crclient.ObjectList
	}{
		{"typed", typed(nil)},
		{"typed/annotated", typed(annotations)},
		{"unstructured", unstructuredOf(typed(nil))},
		{"unstructured/annotated", unstructuredOf(typed(annotations))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			l := bc.list.DeepCopyObject().(crclient.ObjectList)
			for b.Loop() {
				resetItems(l, bc.list)
				if err := markItems(l, "c1"); err != nil {
					b.Fatal(err)
				}
			}
			err := meta.EachListItem(bc.list, func(obj runtime.Object) error {
				if m, _ := meta.Accessor(obj); m.GetAnnotations()[known.ClusterAnnotation] != "" {
					return errors.New("markItems marked the maps it was given")
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// resetItems points the items of l at the maps of those of from, a list of
// the same length and type.
func resetItems(l, from crclient.ObjectList) {
	switch l := l.(type) {
	case *corev1.ConfigMapList:
		for i := range l.Items {
			l.Items[i].Annotations = from.(*corev1.ConfigMapList).Items[i].Annotations
		}
	case *unstructured.UnstructuredList:
		for i := range l.Items {
			l.Items[i].Object = from.(*unstructured.UnstructuredList).Items[i].Object
		}
	}
}
