// Package crdfile reads the CustomResourceDefinition manifests that the
// apis/*/crd packages embed.
package crdfile

import (
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Read returns a new copy of the CRD in the manifest name of fsys. A field
// the manifest misspells is an error, not silently dropped.
func Read(fsys fs.FS, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	raw, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		return nil, fmt.Errorf("crd: %s: %w", name, err)
	}
	return crd, nil
}
