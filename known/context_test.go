package known_test

import (
	"context"
	"slices"
	"testing"

	"github.com/mccr-dev/mccr/known"
)

type otherKey struct{}

func TestClusterFrom(t *testing.T) {
	bg := context.Background()
	if name, ok := known.ClusterFrom(bg); ok || name != "" {
		t.Errorf("empty ctx: %q, %v", name, ok)
	}
	ctx := known.WithCluster(bg, "east")
	if name, ok := known.ClusterFrom(ctx); !ok || name != "east" {
		t.Errorf("ClusterFrom = %q, %v", name, ok)
	}
	// As the reference README reads it.
	if v := ctx.Value(known.ClusterContext); v != "east" {
		t.Errorf("ctx.Value(ClusterContext) = %v", v)
	}
	if name, ok := known.ClusterFrom(known.WithCluster(ctx, "")); ok || name != "" {
		t.Errorf("empty name counts as a cluster: %q", name)
	}
	// Another package's key of the same underlying type does not collide.
	foreign := context.WithValue(bg, otherKey{}, "west")
	if _, ok := known.ClusterFrom(foreign); ok {
		t.Error("a foreign key was read as the cluster")
	}
	// A nil context must not panic.
	if _, ok := known.ClusterFrom(nil); ok { //nolint:staticcheck // SA1012: a nil ctx is what this checks
		t.Error("nil ctx names a cluster")
	}
}

func TestWithClusters(t *testing.T) {
	bg := context.Background()
	if _, ok := known.ClustersFrom(bg); ok {
		t.Error("empty ctx sets a subset")
	}
	names := []string{"a", "b"}
	ctx := known.WithClusters(known.WithCluster(bg, "x"), names...)
	names[0] = "changed"
	got, ok := known.ClustersFrom(ctx)
	if !ok || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("ClustersFrom = %v, %v", got, ok)
	}
	if _, ok := known.ClusterFrom(ctx); ok {
		t.Error("WithClusters kept the single cluster")
	}
	if _, ok := known.ClustersFrom(known.WithClusters(ctx)); ok {
		t.Error("WithClusters() with no names still sets a subset")
	}
}
