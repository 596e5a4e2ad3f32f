package leanmapper_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/mccr-dev/mccr/internal/leanmapper"
	"github.com/mccr-dev/mccr/test"
)

// TestMatchesDynamicMapper compares the lean mapper with
// controller-runtime's on a real API server, and finds a CRD installed
// after it was asked for within two seconds (the mapper keeps a 404 for a second).
func TestMatchesDynamicMapper(t *testing.T) {
	f, err := test.Start(test.Options{}, "lean")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
	})
	cfg := f.Cluster("lean").Config
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lean, err := leanmapper.New(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "ConfigMap"},
		{Version: "v1", Kind: "Namespace"},
		{Version: "v1", Kind: "Node"},
		{Group: "apps", Version: "v1", Kind: "Deployment"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
		{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"},
		{Version: "v1", Kind: "ConfigMapList"},
		{Version: "v1", Kind: "configmap"},
		{Group: "apps", Version: "v1", Kind: "DeploymentList"},
		{Version: "v1", Kind: "NamespaceList"},
		{Version: "v1", Kind: "List"},
	} {
		for _, versions := range [][]string{{gvk.Version}, nil} {
			got, gerr := lean.RESTMapping(gvk.GroupKind(), versions...)
			want, werr := dyn.RESTMapping(gvk.GroupKind(), versions...)
			if gerr != nil || werr != nil {
				t.Errorf("%v %v: lean %v, dynamic %v", gvk, versions, gerr, werr)
				continue
			}
			if got.Resource != want.Resource || got.GroupVersionKind != want.GroupVersionKind || got.Scope.Name() != want.Scope.Name() {
				t.Errorf("%v %v: lean %+v (%s), dynamic %+v (%s)", gvk, versions, got, got.Scope.Name(), want, want.Scope.Name())
			}
		}
	}
	for _, in := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "configmap"},
		{Group: "apps", Resource: "deployments"},
		{Group: "apps", Version: "v1", Resource: "deployment"},
	} {
		got, gerr := lean.KindFor(in)
		want, werr := dyn.KindFor(in)
		if gerr != nil || werr != nil || got != want {
			t.Errorf("KindFor(%v): lean %v %v, dynamic %v %v", in, got, gerr, want, werr)
		}
		gr, gerr := lean.ResourceFor(in)
		wr, werr := dyn.ResourceFor(in)
		if gerr != nil || werr != nil || gr != wr {
			t.Errorf("ResourceFor(%v): lean %v %v, dynamic %v %v", in, gr, gerr, wr, werr)
		}
	}

	// A CRD installed after its kind was asked for.
	group := fmt.Sprintf("lean%d.mccr.test", time.Now().UnixNano())
	gk := schema.GroupKind{Group: group, Kind: "Gadget"}
	if _, err := lean.RESTMapping(gk, "v1"); !meta.IsNoMatchError(err) {
		t.Fatalf("RESTMapping before the CRD = %v, want a no-match error", err)
	}
	crd := test.OpenCRD(group, "Gadget", false)
	if err := test.InstallCRDObjects(cfg, crd); err != nil {
		t.Fatal(err)
	}
	served := time.Now()
	var mp *meta.RESTMapping
	test.Eventually(t, 10*time.Second, "the CRD's kind mapped", func() bool {
		mp, err = lean.RESTMapping(gk, "v1")
		return err == nil
	})
	// A no-match is kept for a second; then discovery is asked again. The
	// bound leaves room for that discovery on a loaded API server.
	if took := time.Since(served); took > 5*time.Second {
		t.Errorf("the CRD's kind was mapped %v after it was served", took)
	}
	if mp.Scope.Name() != meta.RESTScopeNameRoot || mp.Resource.Resource != "gadgets" {
		t.Errorf("CRD mapping = %+v (%s)", mp, mp.Scope.Name())
	}
	if mp, err := lean.RESTMapping(gk); err != nil || mp.GroupVersionKind.Version != "v1" {
		t.Errorf("unversioned RESTMapping of the CRD's kind = %v, %v", mp, err)
	}
}
