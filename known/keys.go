package known

// ClusterAnnotation is set on every item a fleet-wide List returns, naming
// the cluster the item came from. It is set on the returned copies only;
// the fan-out client removes it from an object before Create, Update and
// Patch (and their Status() and SubResource() forms), so writing a listed
// item back never stores it. Apply configurations are built by the caller
// and never carry it.
const ClusterAnnotation = "mccr.dev/cluster"
