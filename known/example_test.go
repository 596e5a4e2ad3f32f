package known_test

import (
	"context"
	"fmt"

	"github.com/mccr-dev/mccr/known"
)

func ExampleClusterFrom() {
	// mccr hands Reconcile a ctx like this one.
	ctx := known.WithCluster(context.Background(), "east")

	name, ok := known.ClusterFrom(ctx)
	fmt.Println(name, ok)
	// Older multi-cluster code reads the value directly.
	fmt.Println(ctx.Value(known.ClusterContext))
	// Output:
	// east true
	// east
}

func ExampleWithCluster() {
	// Inside a Reconcile for cluster "east", aim a call at "west" instead:
	// the fan-out client routes by the cluster in ctx.
	ctx := known.WithCluster(context.Background(), "east")
	west := known.WithCluster(ctx, "west")
	name, _ := known.ClusterFrom(west)
	fmt.Println(name)
	// Output: west
}
