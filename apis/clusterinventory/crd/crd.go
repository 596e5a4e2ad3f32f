// Package crd holds a minimal CustomResourceDefinition of the Cluster
// Inventory API's ClusterProfile (clusterprofiles.multicluster.x-k8s.io,
// KEP-4322), written by hand: the fields mccr reads are spelled out, the
// rest is kept as written.
//
// Install it into a cluster that has no cluster inventory, a test's host
// cluster say, to serve the ClusterProfiles a ClusterProfileWatcher reads.
// A real inventory installs the upstream CRD of
// sigs.k8s.io/cluster-inventory-api, which serves the same objects.
package crd

import (
	"embed"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/mccr-dev/mccr/internal/crdfile"
)

// ClusterProfileFile is the name of ClusterProfile's manifest in FS.
const ClusterProfileFile = "multicluster.x-k8s.io_clusterprofiles.yaml"

// FS holds the manifests, one YAML file per CRD.
//
//go:embed *.yaml
var FS embed.FS

// ClusterProfile returns a new copy of the ClusterProfile CRD.
func ClusterProfile() (*apiextensionsv1.CustomResourceDefinition, error) {
	return crdfile.Read(FS, ClusterProfileFile)
}
