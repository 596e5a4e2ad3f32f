// Package v1beta1 holds the KubeFedCluster API of KubeFed
// (core.kubefed.io/v1beta1), as far as mccr reads and writes it.
//
// KubeFed's own Go module is archived and its tests no longer build against
// a current controller-runtime, which breaks `go mod tidy` in every module
// that depends on it. These types are wire compatible with KubeFed's: same
// group, version, kind, resource and JSON field names, so they read and
// write the KubeFedClusters that kubefedctl join creates, and the CRD
// generated from them (package github.com/mccr-dev/mccr/apis/kubefed/crd)
// serves the same objects. Only KubeFedCluster is here; KubeFed's other
// kinds are not needed to find the clusters of a fleet.
//
// +kubebuilder:object:generate=true
// +groupName=core.kubefed.io
package v1beta1
