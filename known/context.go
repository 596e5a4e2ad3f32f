package known

import (
	"context"
	"slices"
)

// clusterKey is unexported so that no other package can collide with mccr's
// context values, yet the key itself is exported as ClusterContext so that
// ctx.Value(known.ClusterContext) works as the reference README writes it.
type clusterKey struct{}

// clustersKey carries a chosen subset of the fleet for fleet-wide reads.
type clustersKey struct{}

// ClusterContext is the context key under which mccr stores the name (a
// string) of the cluster a context belongs to. Prefer ClusterFrom, which
// also reports whether a name is present.
var ClusterContext any = clusterKey{}

// WithCluster returns a copy of ctx that names cluster. Calls made through
// the fan-out client with the returned context go to that cluster.
//
// An empty name is stored as given and means "no cluster": ClusterFrom
// reports false for it.
func WithCluster(ctx context.Context, cluster string) context.Context {
	return context.WithValue(ctx, clusterKey{}, cluster)
}

// ClusterFrom returns the cluster name stored in ctx by WithCluster (or by
// mccr itself, for the contexts it hands to Reconcile). It reports false
// when ctx names no cluster. It never panics, whatever is stored under the
// key.
func ClusterFrom(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	name, ok := ctx.Value(clusterKey{}).(string)
	return name, ok && name != ""
}

// WithClusters returns a copy of ctx that aims fleet-wide reads (a List
// through the fan-out client with no single cluster in ctx) at the named
// clusters only. It also clears any single cluster set by WithCluster, since
// the two would contradict each other.
//
// Calling it with no names means "every cluster" again.
func WithClusters(ctx context.Context, clusters ...string) context.Context {
	ctx = context.WithValue(ctx, clusterKey{}, "")
	if len(clusters) == 0 {
		return context.WithValue(ctx, clustersKey{}, []string(nil))
	}
	return context.WithValue(ctx, clustersKey{}, slices.Clone(clusters))
}

// ClustersFrom returns the subset of the fleet set by WithClusters. It
// reports false when ctx sets no subset (meaning: every cluster).
func ClustersFrom(ctx context.Context) ([]string, bool) {
	if ctx == nil {
		return nil, false
	}
	names, ok := ctx.Value(clustersKey{}).([]string)
	return names, ok && len(names) > 0
}
