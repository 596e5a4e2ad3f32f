// Package v1alpha1 holds the two kinds of sample/syncer
// (sample.mccr.dev/v1alpha1): FleetSetting, which lives on the host
// cluster and says which member clusters get which Setting, and Setting,
// the copy the syncer keeps in each of those members.
//
// The types are small on purpose, and so is their DeepCopy code, written by
// hand (deepcopy.go) rather than generated. Their CRDs are the hand-written
// manifests in sample/syncer/crd: crd/host for the host, crd/member for
// every member.
package v1alpha1
