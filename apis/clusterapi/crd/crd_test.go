package crd

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The manifest serves what Cluster API's does: the same name, group, kind,
// scope and versions (v1beta2 stored), each with a status subresource.
func TestCluster(t *testing.T) {
	c, err := Cluster()
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "clusters.cluster.x-k8s.io" || c.Spec.Group != "cluster.x-k8s.io" ||
		c.Spec.Names.Kind != "Cluster" || c.Spec.Names.Plural != "clusters" ||
		c.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Fatalf("not Cluster API's Cluster CRD: %s %+v", c.Name, c.Spec.Names)
	}
	served := map[string]bool{}
	for _, v := range c.Spec.Versions {
		if !v.Served || v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("version %s: not served, or no status subresource", v.Name)
		}
		served[v.Name] = v.Storage
	}
	if len(served) != 2 || !served["v1beta2"] || served["v1beta1"] {
		t.Fatalf("versions (name: stored) %v, want v1beta2 stored and v1beta1 served", served)
	}
}

func TestClusterV1Beta1(t *testing.T) {
	c, err := ClusterV1Beta1()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != "v1beta1" || !c.Spec.Versions[0].Storage || !c.Spec.Versions[0].Served {
		t.Fatalf("versions: %+v", c.Spec.Versions)
	}
	// The manifest itself is untouched.
	if full, err := Cluster(); err != nil || len(full.Spec.Versions) != 2 {
		t.Fatalf("Cluster after ClusterV1Beta1: %v, %v", full, err)
	}
}
