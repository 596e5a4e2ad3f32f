// Package crd holds a minimal CustomResourceDefinition of Cluster API's
// Cluster (clusters.cluster.x-k8s.io), written by hand: the name, group,
// kind, scope and versions of Cluster API's own, spec and status left
// open, a status subresource. mccr depends on no Cluster API module.
//
// Install it into a test's host cluster to serve the Cluster objects a
// configwatcher.ClusterAPIWatcher reads, in Options.CRDs of the test kit's
// Fleet or with envtest.InstallCRDs. Cluster serves v1beta2 (stored) and
// v1beta1, as Cluster API v1.11 and later do; ClusterV1Beta1 serves v1beta1
// only, as older management clusters do. There is no conversion webhook: an
// object reads the same in both versions.
package crd

import (
	"embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/mccr-dev/mccr/internal/crdfile"
)

// ClusterFile is the name of Cluster's manifest in FS.
const ClusterFile = "cluster.x-k8s.io_clusters.yaml"

// FS holds the manifests, one YAML file per CRD.
//
//go:embed *.yaml
var FS embed.FS

// Cluster returns a new copy of the Cluster CRD, serving v1beta2 (stored)
// and v1beta1.
func Cluster() (*apiextensionsv1.CustomResourceDefinition, error) {
	return crdfile.Read(FS, ClusterFile)
}

// ClusterV1Beta1 returns a new copy of the Cluster CRD as management
// clusters before Cluster API v1.11 serve it: v1beta1 only, stored.
func ClusterV1Beta1() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd, err := Cluster()
	if err != nil {
		return nil, err
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1beta1" {
			v.Storage, v.Deprecated = true, false
			crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{v}
			return crd, nil
		}
	}
	return nil, fmt.Errorf("crd: %s serves no v1beta1", ClusterFile)
}
