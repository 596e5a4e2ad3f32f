package configwatcher_test

import (
	"context"
	"log"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/configwatcher"
	mccrserver "github.com/mccr-dev/mccr/server"
)

// Run a controller in every cluster of a Cluster Inventory: the
// ClusterProfiles of the hub cluster (here, the one the usual kubeconfig
// rules find), each reached through the exec plugin the operator lists
// for its access provider, in the file the Cluster Inventory API's tools
// take as --clusterprofile-provider-file. A cluster joins once its cluster
// manager reports it healthy; its reconcilers read the profile's
// properties, its cluster ID among them.
func ExampleNewClusterProfileWatcher() {
	hub := ctrl.GetConfigOrDie()
	w, err := configwatcher.NewClusterProfileWatcher(hub,
		configwatcher.WithAccessProvidersFile("/etc/mccr/clusterprofile-provider-file.json"),
		// Optional: only the ClusterSet's namespace (all by default), and
		// clusters named after their profile alone, not "<namespace>/<name>".
		configwatcher.WithClusterProfileNamespaces("fleet"),
		configwatcher.WithClusterProfileName(configwatcher.ClusterProfileObjectName),
	)
	if err != nil {
		// A providers file that does not load is an error naming it.
		log.Fatal(err)
	}
	srv, err := mccrserver.NewServer(hub, ctrl.Options{})
	if err != nil {
		w.Stop()
		log.Fatal(err)
	}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("nodes-by-cluster-id").For(&corev1.Node{}).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				props, err := srv.ClusterProperties(ctx)
				if err != nil {
					return reconcile.Result{}, err
				}
				log.Printf("node %s in cluster %s", req.Name, props[configwatcher.ClusterIDProperty])
				return reconcile.Result{}, nil
			}))
	})
	// Problems with a profile ("ClusterProfile fleet/prod: …") are in
	// srv.WatchErrors.
	srv.Watch(w)
	if err := srv.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Fatal(err)
	}
}
