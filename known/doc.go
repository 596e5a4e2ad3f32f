// Package known holds the names every part of mccr agrees on: the context key
// that carries a cluster's name into Reconcile and into the fan-out client,
// and the label and annotation keys mccr sets on objects it hands back.
//
// A reconciler written for a single cluster needs nothing from this package.
// One that wants to know which cluster it is working on reads
//
//	name, _ := known.ClusterFrom(ctx)
//
// or, as older multi-cluster code does, ctx.Value(known.ClusterContext). A
// reconciler that wants to reach another member of the fleet through the
// fan-out client derives a context with WithCluster.
package known
