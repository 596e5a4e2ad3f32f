package configwatcher_test

import (
	"context"
	"fmt"
	"log"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/known"
	mccrserver "github.com/mccr-dev/mccr/server"
)

// Run a controller in every workload cluster of a Cluster API management
// cluster. The program runs against the management cluster (here, the one
// the usual kubeconfig rules find); each Cluster joins once its control
// plane is initialized, and its reconciles see it as "<namespace>/<name>".
func ExampleNewClusterAPIWatcher() {
	mgmt := ctrl.GetConfigOrDie()
	w, err := configwatcher.NewClusterAPIWatcher(mgmt,
		// Optional: only these namespaces (all by default), and only
		// Clusters whose Available condition is True.
		configwatcher.WithClusterAPINamespaces("team-a", "team-b"),
		configwatcher.RequireAvailable(),
	)
	if err != nil {
		log.Fatal(err)
	}
	srv, err := mccrserver.NewServer(mgmt, ctrl.Options{})
	if err != nil {
		w.Stop()
		log.Fatal(err)
	}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("nodes-report").For(&corev1.Node{}).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				cluster, _ := known.ClusterFrom(ctx) // "team-a/prod"
				log.Printf("node %s in cluster %s", req.Name, cluster)
				return reconcile.Result{}, nil
			}))
	})
	// The Server applies the watcher's events, keeps its errors (see
	// WatchErrors), and stops it when Start returns.
	srv.Watch(w)
	if err := srv.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Fatal(err)
	}
}

// Clusters are named "<namespace>/<name>" unless WithClusterAPIName says
// otherwise; an empty name leaves a Cluster out.
func ExampleWithClusterAPIName() {
	name := func(namespace, name string) string {
		if namespace == "sandbox" {
			return "" // not part of the fleet
		}
		return configwatcher.DefaultClusterAPIName(namespace, name)
	}
	_ = configwatcher.WithClusterAPIName(name)

	fmt.Printf("%q %q\n", name("team-a", "prod"), name("sandbox", "try"))
	// Output: "team-a/prod" ""
}
