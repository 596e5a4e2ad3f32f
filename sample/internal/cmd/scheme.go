package cmd

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// NewScheme holds client-go's kinds and those each of addToScheme adds;
// it panics when one fails, as a kubebuilder main's init does.
func NewScheme(addToScheme ...func(*runtime.Scheme) error) *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	for _, add := range addToScheme {
		utilruntime.Must(add(s))
	}
	return s
}
