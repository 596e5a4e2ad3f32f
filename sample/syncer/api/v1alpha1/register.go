package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the sample's API group and version.
var GroupVersion = schema.GroupVersion{Group: "sample.mccr.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers this package's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds FleetSetting, Setting and their lists to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &FleetSetting{}, &FleetSettingList{}, &Setting{}, &SettingList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
