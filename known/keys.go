package known

// ClusterAnnotation is set on every item a fleet-wide List returns, naming
// the cluster the item came from. It is set on the returned copies only;
// the fan-out client removes it from an object before Create, Update and
// Patch, leaves it out of every patch it sends, and sends an apply
// configuration made from a listed item without it (in Status() and
// SubResource() forms too), so writing a listed item back never stores it.
const ClusterAnnotation = "mccr.dev/cluster"
