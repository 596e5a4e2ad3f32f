package client_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/internal/router"
	"github.com/mccr-dev/mccr/known"
)

// sentPatches returns a fan-out client over one member, "c1", holding a
// ConfigMap default/cm with annotations, and a function that returns the
// patch documents the member's client was given (Patch and the status
// subresource's), one per call.
func sentPatches(t *testing.T, annotations map[string]string) (*mcclient.Client, func() []string) {
	t.Helper()
	var sent []string
	record := func(obj crclient.Object, p crclient.Patch) {
		data, err := p.Data(obj)
		if err != nil {
			t.Errorf("patch data: %v", err)
		}
		sent = append(sent, string(data))
	}
	member := fake.NewClientBuilder().
		WithObjects(&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm", Annotations: annotations},
			Data:       map[string]string{"a": "1"},
		}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c crclient.WithWatch, obj crclient.Object, p crclient.Patch, opts ...crclient.PatchOption) error {
				record(obj, p)
				if p.Type() == types.ApplyPatchType || p.Type() == types.JSONPatchType {
					// Not applied: the fake client cannot apply typed
					// objects, and the JSON patch tested is no real one.
					return nil
				}
				return c.Patch(ctx, obj, p, opts...)
			},
			SubResourcePatch: func(_ context.Context, _ crclient.Client, _ string, obj crclient.Object, p crclient.Patch, _ ...crclient.SubResourcePatchOption) error {
				record(obj, p)
				return nil
			},
		}).Build()
	var table router.Table
	table.Set("c1", member, true)
	return mcclient.New(&table, mcclient.Options{Scheme: scheme.Scheme}), func() []string {
		out := sent
		sent = nil
		return out
	}
}

// TestPatchDocumentNeverMentionsTheClusterAnnotation: whatever the patch's
// type, the document sent for an item of a fleet-wide List says nothing of
// known.ClusterAnnotation, and changes the annotations the caller changed
// as it would without it.
func TestPatchDocumentNeverMentionsTheClusterAnnotation(t *testing.T) {
	bg := context.Background()
	for _, tc := range []struct {
		name  string
		given map[string]string // the member's annotations
		patch func(item *corev1.ConfigMap) crclient.Patch
		want  string // the document sent
		// status: sent through Status().Patch.
		status bool
	}{{
		name:  "MergeFrom, data only",
		patch: mergeFrom(func(item *corev1.ConfigMap) { item.Data["b"] = "2" }),
		want:  `{"data":{"b":"2"}}`,
	}, {
		name:  "MergeFrom, an annotation removed",
		given: map[string]string{"x": "1"},
		patch: mergeFrom(func(item *corev1.ConfigMap) { item.Annotations = nil }),
		want:  `{"metadata":{"annotations":{"x":null}}}`,
	}, {
		name:  "MergeFrom, an annotation added",
		patch: mergeFrom(func(item *corev1.ConfigMap) { item.Annotations["y"] = "2" }),
		want:  `{"metadata":{"annotations":{"y":"2"}}}`,
	}, {
		name:  "MergeFrom, the annotation removed by the caller",
		patch: mergeFrom(func(item *corev1.ConfigMap) { delete(item.Annotations, known.ClusterAnnotation) }),
		want:  `{}`,
	}, {
		name: "MergeFromWithOptimisticLock",
		patch: func(item *corev1.ConfigMap) crclient.Patch {
			base := item.DeepCopy()
			item.Data["b"] = "2"
			return crclient.MergeFromWithOptions(base, crclient.MergeFromWithOptimisticLock{})
		},
		want: `{"data":{"b":"2"},"metadata":{"resourceVersion":"999"}}`,
	}, {
		name: "StrategicMergeFrom",
		patch: func(item *corev1.ConfigMap) crclient.Patch {
			base := item.DeepCopy()
			item.Data["b"] = "2"
			return crclient.StrategicMergeFrom(base)
		},
		want: `{"data":{"b":"2"}}`,
	}, {
		name: "JSON patch",
		patch: rawPatch(types.JSONPatchType, `[`+
			`{"op":"test","path":"/metadata/annotations/mccr.dev~1cluster","value":"c1"},`+
			`{"op":"replace","path":"/metadata/annotations","value":{"mccr.dev/cluster":"c1","y":"2"}},`+
			`{"op":"add","path":"/metadata","value":{"annotations":{"mccr.dev/cluster":"c1"}}},`+
			`{"op":"add","path":"/data/b","value":"2"}]`),
		want: `[{"op":"replace","path":"/metadata/annotations","value":{"y":"2"}},` +
			`{"op":"add","path":"/metadata","value":{"annotations":{}}},` +
			`{"op":"add","path":"/data/b","value":"2"}]`,
	}, {
		name:  "merge patch",
		patch: rawPatch(types.MergePatchType, `{"metadata":{"annotations":{"mccr.dev/cluster":null,"y":"2"}}}`),
		want:  `{"metadata":{"annotations":{"y":"2"}}}`,
	}, {
		name:  "merge patch, the key escaped",
		patch: rawPatch(types.MergePatchType, `{"metadata":{"annotations":{"mccr\u002edev/cluster":"c1","\u006dccr.dev\/cluster":"c1","y":"2"}}}`),
		want:  `{"metadata":{"annotations":{"y":"2"}}}`,
	}, {
		name: "JSON patch, the path escaped",
		patch: rawPatch(types.JSONPatchType, `[{"op":"add","path":"/metadata/annotations/mccr\u002edev~1cluster","value":"c1"},`+
			`{"op":"add","path":"/data/b","value":"2"}]`),
		want: `[{"op":"add","path":"/data/b","value":"2"}]`,
	}, {
		name:  "apply patch",
		patch: func(*corev1.ConfigMap) crclient.Patch { return crclient.Apply }, //nolint:staticcheck // the patch type is what is tested
		want:  "",                                                               // checked below: no mention
	}, {
		name:   "Status().Patch",
		patch:  mergeFrom(func(item *corev1.ConfigMap) { item.Data["b"] = "2" }),
		want:   `{"data":{"b":"2"}}`,
		status: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, sent := sentPatches(t, tc.given)
			var list corev1.ConfigMapList
			if err := c.List(bg, &list); err != nil || len(list.Items) != 1 {
				t.Fatalf("List = %v, %d items", err, len(list.Items))
			}
			item := &list.Items[0]
			if item.Annotations[known.ClusterAnnotation] != "c1" {
				t.Fatalf("listed item not marked: %v", item.Annotations)
			}
			patch := tc.patch(item)
			var err error
			if tc.status {
				err = c.Status().Patch(in("c1"), item, patch)
			} else {
				err = c.Patch(in("c1"), item, patch)
			}
			if err != nil {
				t.Fatalf("Patch = %v", err)
			}
			got := sent()
			if len(got) != 1 {
				t.Fatalf("%d patches sent", len(got))
			}
			if strings.Contains(got[0], "mccr.dev") {
				t.Errorf("patch sent %s mentions the cluster annotation", got[0])
			}
			if tc.want != "" && !sameJSON(t, got[0], tc.want) {
				t.Errorf("patch sent %s, want %s", got[0], tc.want)
			}
			if _, ok := item.Annotations[known.ClusterAnnotation]; ok {
				t.Errorf("obj still carries the annotation after the Patch: %v", item.Annotations)
			}
		})
	}
}

// TestPatchOfAnItemNotListedIsControllerRuntimes: for an object read
// with a one-cluster Get (no cluster annotation), the patch sent is the one
// controller-runtime sends, byte for byte, whatever the caller changed.
func TestPatchOfAnItemNotListedIsControllerRuntimes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(cm *corev1.ConfigMap)
		patch  func(base *corev1.ConfigMap) crclient.Patch
	}{
		{"data", func(cm *corev1.ConfigMap) { cm.Data["b"] = "2" }, nil},
		{"every annotation removed", func(cm *corev1.ConfigMap) { cm.Annotations = nil }, nil},
		{"an annotation removed", func(cm *corev1.ConfigMap) { delete(cm.Annotations, "x") }, nil},
		{"an annotation added", func(cm *corev1.ConfigMap) { cm.Annotations["y"] = "2" }, nil},
		{"every annotation replaced", func(cm *corev1.ConfigMap) { cm.Annotations = map[string]string{"y": "2"} }, nil},
		{"the annotation set by the caller", func(cm *corev1.ConfigMap) { cm.Annotations[known.ClusterAnnotation] = "c1" }, nil},
		{"strategic, every annotation removed", func(cm *corev1.ConfigMap) { cm.Annotations = nil },
			func(base *corev1.ConfigMap) crclient.Patch { return crclient.StrategicMergeFrom(base) }},
		{"optimistic lock", func(cm *corev1.ConfigMap) { cm.Annotations = nil },
			func(base *corev1.ConfigMap) crclient.Patch {
				return crclient.MergeFromWithOptions(base, crclient.MergeFromWithOptimisticLock{})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, sent := sentPatches(t, map[string]string{"x": "1", "z": "3"})
			var cm corev1.ConfigMap
			if err := c.Get(in("c1"), crclient.ObjectKey{Namespace: "default", Name: "cm"}, &cm); err != nil {
				t.Fatal(err)
			}
			base := cm.DeepCopy()
			tc.change(&cm)
			patch := crclient.MergeFrom(base)
			if tc.patch != nil {
				patch = tc.patch(base)
			}
			plain := cm.DeepCopy()
			delete(plain.Annotations, known.ClusterAnnotation) // what a write sends of obj
			want, err := patch.Data(plain)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Patch(in("c1"), &cm, patch); err != nil {
				t.Fatal(err)
			}
			if got := sent(); len(got) != 1 || got[0] != string(want) {
				t.Errorf("sent %q; controller-runtime sends %s", got, want)
			}
		})
	}
}

func mergeFrom(change func(item *corev1.ConfigMap)) func(item *corev1.ConfigMap) crclient.Patch {
	return func(item *corev1.ConfigMap) crclient.Patch {
		base := item.DeepCopy()
		change(item)
		return crclient.MergeFrom(base)
	}
}

func rawPatch(pt types.PatchType, data string) func(*corev1.ConfigMap) crclient.Patch {
	return func(*corev1.ConfigMap) crclient.Patch { return crclient.RawPatch(pt, []byte(data)) }
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}
