package configwatcher

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func cond(typ, status string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": "R", "message": "a long message", "lastTransitionTime": "2026-01-01T00:00:00Z"}
}

// When a Cluster is ready, in each version's words.
func TestClusterAPIReady(t *testing.T) {
	for _, tc := range []struct {
		name, version          string
		status                 map[string]any
		initialized, available bool
	}{
		{"v1beta2 nothing", "v1beta2", map[string]any{}, false, false},
		{"v1beta2 initialized", "v1beta2", map[string]any{"initialization": map[string]any{"controlPlaneInitialized": true}}, true, false},
		{"v1beta2 initialized false", "v1beta2", map[string]any{"initialization": map[string]any{"controlPlaneInitialized": false}}, false, false},
		{"v1beta2 condition", "v1beta2", map[string]any{"conditions": []any{cond("ControlPlaneInitialized", "True")}}, true, false},
		{"v1beta2 available", "v1beta2", map[string]any{
			"initialization": map[string]any{"controlPlaneInitialized": true},
			"conditions":     []any{cond("Available", "True")},
		}, true, true},
		{"v1beta2 ignores v1beta1 fields", "v1beta2", map[string]any{"controlPlaneReady": true, "conditions": []any{cond("Ready", "True")}}, false, false},
		{"v1beta1 controlPlaneReady", "v1beta1", map[string]any{"controlPlaneReady": true}, true, false},
		{"v1beta1 condition", "v1beta1", map[string]any{"conditions": []any{cond("ControlPlaneInitialized", "True")}}, true, false},
		{"v1beta1 v1beta2 condition", "v1beta1", map[string]any{"v1beta2": map[string]any{"conditions": []any{cond("ControlPlaneInitialized", "True")}}}, true, false},
		{"v1beta1 Available False despite Ready", "v1beta1", map[string]any{
			"controlPlaneReady": true,
			"conditions":        []any{cond("Ready", "True")},
			"v1beta2":           map[string]any{"conditions": []any{cond("Available", "False")}},
		}, true, false},
		{"v1beta1 Available", "v1beta1", map[string]any{
			"controlPlaneReady": true,
			"v1beta2":           map[string]any{"conditions": []any{cond("Available", "True")}},
		}, true, true},
		{"v1beta1 before v1.9: Ready", "v1beta1", map[string]any{"controlPlaneReady": true, "conditions": []any{cond("Ready", "True")}}, true, true},
		{"v1beta1 before v1.9: not Ready", "v1beta1", map[string]any{"controlPlaneReady": true, "conditions": []any{cond("Ready", "False")}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "cluster.x-k8s.io/" + tc.version, "kind": "Cluster",
				"metadata": map[string]any{"name": "c", "namespace": "ns"},
				"status":   tc.status,
			}}
			// Read as the watcher does: through the cache's transform.
			if _, err := clusterAPITransform(u); err != nil {
				t.Fatal(err)
			}
			cl, err := readClusterAPICluster(u)
			if err != nil {
				t.Fatal(err)
			}
			if got := cl.ready(tc.version, false); got != tc.initialized {
				t.Errorf("initialized = %v, want %v", got, tc.initialized)
			}
			if got := cl.ready(tc.version, true); got != tc.available {
				t.Errorf("available = %v, want %v", got, tc.available)
			}
		})
	}
}

// The transform keeps what is read, and nothing else: no spec, no
// condition messages, no annotations, no key of a Secret but a
// kubeconfig's "value".
func TestClusterAPITransform(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{
			"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
			"annotations": map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{…}"},
			"labels":      map[string]any{"a": "b"},
		},
		"spec": map[string]any{"topology": map[string]any{"variables": []any{"big"}}},
		"status": map[string]any{
			"phase":          "Provisioned",
			"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true},
			"conditions":     []any{cond("Available", "True")},
		},
	}}
	if _, err := clusterAPITransform(u); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"initialization": map[string]any{"controlPlaneInitialized": true},
		"conditions":     []any{map[string]any{"type": "Available", "status": "True"}},
	}
	if _, ok := u.Object["spec"]; ok {
		t.Error("spec kept")
	}
	if got := u.Object["status"]; !reflect.DeepEqual(got, want) {
		t.Errorf("status = %v, want %v", got, want)
	}
	// Labels stay: they are the cluster's Properties.
	if u.GetAnnotations() != nil || u.GetLabels()["a"] != "b" || u.GetResourceVersion() != "7" || u.GetUID() != "u1" {
		t.Errorf("metadata = %v", u.Object["metadata"])
	}

	for name, want := range map[string]map[string][]byte{
		"c-kubeconfig": {"value": []byte("kc")},
		"c-ca":         nil,
		"c-sa":         nil,
	} {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"a": "b"}},
			Data:       map[string][]byte{"value": []byte("kc"), "tls.key": []byte("private"), "tls.crt": []byte("cert")},
		}
		if _, err := clusterAPITransform(s); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(s.Data, want) || s.Annotations != nil {
			t.Errorf("Secret %s: data %q, annotations %v; want data %q", name, s.Data, s.Annotations, want)
		}
	}
}
