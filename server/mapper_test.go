package server_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/test"
)

// A kind installed in a member alone (an operator's CRD its host no longer
// serves) maps through the fan-out client as the member maps it: its
// RESTMapper and IsObjectNamespaced answer, and so does a wrapper that
// asks them with no cluster to name, client.NewNamespacedClient.
func TestFanOutMapperKnowsMemberOnlyKinds(t *testing.T) {
	ns := testNamespace(t)
	crd, gvk := widgetCRD(ns)
	if err := test.InstallCRDObjects(fleet.Cluster("m2").Config, crd); err != nil {
		t.Fatal(err)
	}
	r := startServer(t, ns, nil)
	addReady(t, r.srv, "m1", "m2")
	cl := r.srv.GetClient()
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(gvk)
	w.SetName("w1")

	// The host's mapper has no match; m1's neither; m2's has.
	if _, err := r.srv.GetHostManager().GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); !meta.IsNoMatchError(err) {
		t.Fatalf("host mapping of a kind only m2 serves: %v", err)
	}
	namespaced, err := cl.IsObjectNamespaced(w)
	if err != nil || !namespaced {
		t.Fatalf("IsObjectNamespaced(Widget) = %v, %v; want true", namespaced, err)
	}
	m, err := cl.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil || m.Resource.Resource != "widgets" {
		t.Fatalf("RESTMapping(Widget) = %v, %v", m, err)
	}
	nsClient := crclient.NewNamespacedClient(cl, ns)
	ctx := known.WithCluster(t.Context(), "m2")
	if err := nsClient.Create(ctx, w); err != nil {
		t.Fatalf("Create through NewNamespacedClient in m2: %v", err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	test.Eventually(t, 10*time.Second, "the Widget read back from m2", func() bool {
		return adminClient(t, "m2").Get(t.Context(), crclient.ObjectKey{Namespace: ns, Name: "w1"}, got) == nil
	})

	// A kind nobody serves is still the host's no-match.
	none := &unstructured.Unstructured{}
	none.SetGroupVersionKind(gvk.GroupVersion().WithKind("Gadget"))
	if _, err := cl.IsObjectNamespaced(none); !meta.IsNoMatchError(err) {
		t.Errorf("IsObjectNamespaced of a kind no cluster serves: %v, want a no-match", err)
	}
}
