// Package crd holds the CustomResourceDefinition of the Cluster Inventory
// API's ClusterProfile (clusterprofiles.multicluster.x-k8s.io, KEP-4322)
// as the upstream project, sigs.k8s.io/cluster-inventory-api, ships it:
// the manifests are kept unmodified, so that what a test writes is
// validated, pruned and served as on a real inventory.
//
// Install one into a cluster that has no cluster inventory, a test's host
// cluster say, to serve the ClusterProfiles a ClusterProfileWatcher reads.
// ClusterProfile serves v1alpha1 (stored) and v1alpha2, as inventories of
// release v0.2 do; ClusterProfileV1Alpha1 serves v1alpha1 only, as older
// ones do. Neither has a conversion webhook: an object reads the same in
// both versions, less the fields the version read lacks
// (status.credentialProviders is v1alpha1's only).
package crd

import (
	"embed"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/mccr-dev/mccr/internal/crdfile"
)

// Names of the manifests in FS.
const (
	// ClusterProfileFile serves v1alpha1 (stored) and v1alpha2.
	ClusterProfileFile = "multicluster.x-k8s.io_clusterprofiles.yaml"
	// ClusterProfileV1Alpha1File serves v1alpha1 only.
	ClusterProfileV1Alpha1File = "multicluster.x-k8s.io_clusterprofiles_v1alpha1.yaml"
)

// FS holds the manifests, one YAML file per CRD.
//
//go:embed *.yaml
var FS embed.FS

// ClusterProfile returns a new copy of the ClusterProfile CRD serving
// v1alpha1 (stored) and v1alpha2.
func ClusterProfile() (*apiextensionsv1.CustomResourceDefinition, error) {
	return crdfile.Read(FS, ClusterProfileFile)
}

// ClusterProfileV1Alpha1 returns a new copy of the ClusterProfile CRD as
// inventories before v1alpha2 serve it: v1alpha1 only.
func ClusterProfileV1Alpha1() (*apiextensionsv1.CustomResourceDefinition, error) {
	return crdfile.Read(FS, ClusterProfileV1Alpha1File)
}
