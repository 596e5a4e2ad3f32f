// Package clusterinventory spells the facts of the Cluster Inventory API
// (KEP-4322, sigs.k8s.io/cluster-inventory-api) that mccr reads: the
// group, kind and versions of ClusterProfile, its well-known labels and
// condition types. They are mccr's own, so that neither mccr nor a module
// importing it depends on the upstream module; its subpackage crd holds
// the upstream CRD for tests.
package clusterinventory
