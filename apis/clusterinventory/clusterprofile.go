package clusterinventory

import "k8s.io/apimachinery/pkg/runtime/schema"

// Group and Kind of ClusterProfile.
const (
	Group = "multicluster.x-k8s.io"
	Kind  = "ClusterProfile"
)

// The versions of ClusterProfile. They read alike, except that v1alpha2
// lacks v1alpha1's deprecated status.credentialProviders (an API server
// serving both prunes it from what it serves as v1alpha2) and validates
// more strictly (a server must be an absolute URL, a property value at
// most 1024 bytes).
const (
	V1Alpha1 = "v1alpha1"
	V1Alpha2 = "v1alpha2"
)

// Versions are the versions of ClusterProfile mccr reads, the one it
// prefers first (the newest, which is also what discovery prefers).
var Versions = []string{V1Alpha2, V1Alpha1}

// GroupVersionKind is ClusterProfile's in version.
func GroupVersionKind(version string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: Group, Version: version, Kind: Kind}
}

// Labels of a ClusterProfile.
const (
	// LabelClusterManager names the cluster manager that owns the profile;
	// its value is spec.clusterManager.name.
	LabelClusterManager = "x-k8s.io/cluster-manager"

	// LabelInventoryMemberID correlates the ClusterProfiles that stand for
	// one member cluster: profiles on one hub with the same non-empty
	// value describe the same cluster, whatever their namespaces or
	// cluster managers; profiles without it (or with an empty value) are
	// each a member of their own. The hub's administrator coordinates the
	// values; a cluster manager keeps a profile's value while it describes
	// the same cluster.
	LabelInventoryMemberID = "multicluster.x-k8s.io/inventory-member-id"

	// LabelClusterSet, on a namespace, names the ClusterSet its profiles
	// belong to.
	LabelClusterSet = "multicluster.x-k8s.io/clusterset"
)

// Condition types of a ClusterProfile's status.
const (
	// ConditionControlPlaneHealthy is True while the cluster manager finds
	// the cluster's control plane healthy.
	ConditionControlPlaneHealthy = "ControlPlaneHealthy"

	// ConditionJoined says whether the cluster is under management by the
	// cluster manager: False once it has left the inventory or is
	// leaving it. Cluster managers that predate it do not set it.
	ConditionJoined = "Joined"
)
