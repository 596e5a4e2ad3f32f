package crd

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The generated CRD serves what kubefedctl join writes: the same name,
// group, kind, scope and version as KubeFed's own, with a status
// subresource.
func TestKubeFedCluster(t *testing.T) {
	c, err := KubeFedCluster()
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "kubefedclusters.core.kubefed.io" || c.Spec.Group != "core.kubefed.io" ||
		c.Spec.Names.Kind != "KubeFedCluster" || c.Spec.Names.Plural != "kubefedclusters" ||
		c.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Fatalf("not KubeFed's KubeFedCluster CRD: %s %+v", c.Name, c.Spec.Names)
	}
	if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != "v1beta1" || !c.Spec.Versions[0].Storage ||
		c.Spec.Versions[0].Subresources == nil || c.Spec.Versions[0].Subresources.Status == nil {
		t.Fatalf("versions: %+v", c.Spec.Versions)
	}
	spec := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for _, f := range []string{"apiEndpoint", "caBundle", "secretRef", "disabledTLSValidations", "proxyURL"} {
		if _, ok := spec.Properties[f]; !ok {
			t.Errorf("spec.%s missing from the schema", f)
		}
	}
}
