package crd

import (
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Both manifests are the upstream CRD: its name, group, kind and scope, a
// status subresource in every version, v1alpha1 stored; the status fields
// a ClusterProfileWatcher reads are in the schema of each version, and
// status.credentialProviders only in v1alpha1's.
func TestClusterProfile(t *testing.T) {
	for _, c := range []struct {
		name     string
		read     func() (*apiextensionsv1.CustomResourceDefinition, error)
		versions []string
	}{
		{"ClusterProfile", ClusterProfile, []string{"v1alpha1", "v1alpha2"}},
		{"ClusterProfileV1Alpha1", ClusterProfileV1Alpha1, []string{"v1alpha1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			crd, err := c.read()
			if err != nil {
				t.Fatal(err)
			}
			if crd.Name != "clusterprofiles.multicluster.x-k8s.io" || crd.Spec.Group != "multicluster.x-k8s.io" ||
				crd.Spec.Names.Kind != "ClusterProfile" || crd.Spec.Names.Plural != "clusterprofiles" ||
				crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
				t.Fatalf("not the ClusterProfile CRD: %s %+v", crd.Name, crd.Spec.Names)
			}
			served := make([]string, 0, len(crd.Spec.Versions))
			for _, v := range crd.Spec.Versions {
				if !v.Served || v.Subresources == nil || v.Subresources.Status == nil {
					t.Errorf("%s: served %v, status subresource %v", v.Name, v.Served, v.Subresources)
				}
				if v.Storage != (v.Name == "v1alpha1") {
					t.Errorf("%s: storage %v", v.Name, v.Storage)
				}
				served = append(served, v.Name)
				status := v.Schema.OpenAPIV3Schema.Properties["status"]
				for _, f := range []string{"conditions", "properties", "accessProviders"} {
					if _, ok := status.Properties[f]; !ok {
						t.Errorf("%s: status.%s missing from the schema", v.Name, f)
					}
				}
				if _, ok := status.Properties["credentialProviders"]; ok != (v.Name == "v1alpha1") {
					t.Errorf("%s: status.credentialProviders in the schema: %v", v.Name, ok)
				}
				ap := status.Properties["accessProviders"].Items.Schema.Properties["cluster"]
				if _, ok := ap.Properties["certificate-authority-data"]; !ok {
					t.Errorf("%s: accessProviders[].cluster.certificate-authority-data missing from the schema", v.Name)
				}
			}
			if !slices.Equal(served, c.versions) {
				t.Errorf("versions %v, want %v", served, c.versions)
			}
		})
	}
}
