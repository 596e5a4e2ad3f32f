package known

// ClusterAnnotation is set on every item a fleet-wide List returns, naming
// the cluster the item came from. It is set on the returned copies only; the
// fan-out client removes it again before any write, so it never reaches an
// API server through mccr.
const ClusterAnnotation = "mccr.dev/cluster"
