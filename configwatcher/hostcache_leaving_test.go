package configwatcher

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	capicrd "github.com/mccr-dev/mccr/apis/clusterapi/crd"
	"github.com/mccr-dev/mccr/test"
)

// TestHostCacheLeaving asks, on a real API server, whether a Cluster as a
// cache last held it is leaving: the question a Cluster whose kubeconfig
// Secret is gone from the cache puts before its Secret's absence is
// reported. Gone, replaced under its name, or being deleted: leaving.
// Still there: not, and neither when the host cannot say.
func TestHostCacheLeaving(t *testing.T) {
	f := test.NewFleet(t, test.Options{}, "leaving-host")
	host := f.Cluster("leaving-host")
	crd, err := capicrd.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(host.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(host.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "leaving"
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	proxy := test.NewFaultProxy(t, host.Config)
	w, err := NewClusterAPIWatcher(proxy.Config(), WithLogger(testr.New(t)), WithClusterAPINamespaces(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	// cached is Cluster name as the watcher's cache holds it, read as sync
	// reads it: from a list of the cache.
	cached := func(name string) *unstructured.Unstructured {
		t.Helper()
		var found *unstructured.Unstructured
		test.Eventually(t, 30*time.Second, "Cluster "+name+" in the cache", func() bool {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(clusterAPIGroupVersion(w.version).WithKind("ClusterList"))
			if listed, _ := w.list("Clusters", list); !listed {
				return false
			}
			for i := range list.Items {
				if list.Items[i].GetName() == name {
					found = &list.Items[i]
					return true
				}
			}
			return false
		})
		return found
	}
	create := func(name string, finalizers ...string) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec":     map[string]any{"controlPlaneEndpoint": map[string]any{"host": "example.invalid", "port": int64(6443)}},
		}}
		u.SetFinalizers(finalizers)
		if err := c.Create(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(u *unstructured.Unstructured) {
		t.Helper()
		if err := c.Delete(t.Context(), u.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, u *unstructured.Unstructured, want bool) {
		t.Helper()
		if got := w.leaving(u); got != want {
			t.Errorf("%s: leaving %v, want %v", what, got, want)
		}
	}

	create("stays")
	expect("a Cluster still there", cached("stays"), false)

	create("gone")
	gone := cached("gone")
	remove(gone)
	expect("a Cluster deleted", gone, true)

	create("again")
	old := cached("again")
	remove(old)
	create("again")
	expect("a Cluster deleted and created again under its name", old, true)

	const hold = "cluster.cluster.x-k8s.io"
	create("deleting", hold)
	deleting := cached("deleting")
	remove(deleting)
	expect("a Cluster being deleted (held by Cluster API's finalizer)", deleting, true)
	t.Cleanup(func() {
		if err := c.Patch(context.Background(), deleting, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
			t.Error(err)
		}
	})

	// The host unreachable: no answer is no reason to drop the problem.
	proxy.Refuse()
	begin := time.Now()
	expect("a deleted Cluster while the host refuses", gone, false)
	if took := time.Since(begin); took > hostLiveTimeout+5*time.Second {
		t.Errorf("asking a refusing host took %s", took)
	}
}
