package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is KubeFed's core API group and version.
var GroupVersion = schema.GroupVersion{Group: "core.kubefed.io", Version: "v1beta1"}

var (
	// SchemeBuilder registers this package's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds KubeFedCluster and KubeFedClusterList to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &KubeFedCluster{}, &KubeFedClusterList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
