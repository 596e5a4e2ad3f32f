package crd

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The CRD serves what cluster managers write: the upstream CRD's name,
// group, kind, scope and version, with a status subresource and the status
// fields a ClusterProfileWatcher reads.
func TestClusterProfile(t *testing.T) {
	c, err := ClusterProfile()
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "clusterprofiles.multicluster.x-k8s.io" || c.Spec.Group != "multicluster.x-k8s.io" ||
		c.Spec.Names.Kind != "ClusterProfile" || c.Spec.Names.Plural != "clusterprofiles" ||
		c.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Fatalf("not the ClusterProfile CRD: %s %+v", c.Name, c.Spec.Names)
	}
	if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != "v1alpha1" || !c.Spec.Versions[0].Storage ||
		c.Spec.Versions[0].Subresources == nil || c.Spec.Versions[0].Subresources.Status == nil {
		t.Fatalf("versions: %+v", c.Spec.Versions)
	}
	status := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	for _, f := range []string{"conditions", "properties", "accessProviders", "credentialProviders"} {
		if _, ok := status.Properties[f]; !ok {
			t.Errorf("status.%s missing from the schema", f)
		}
	}
	ap := status.Properties["accessProviders"].Items.Schema.Properties["cluster"]
	if _, ok := ap.Properties["certificate-authority-data"]; !ok {
		t.Error("accessProviders[].cluster.certificate-authority-data missing from the schema")
	}
}
